"""Authentication: a bearer key becomes a `Principal` without touching a database.

The contract (`Authenticator`, `bearer_token`) is `fleetgate.contract.principal`."""

from __future__ import annotations

import hmac

from fleetgate.contract.principal import Authenticator, Principal
from fleetgate.errors import AuthenticationFailed

__all__ = ["JwtOrKey", "MasterKeyAuthenticator", "looks_like_jwt"]


class MasterKeyAuthenticator:
    """Accepts the master key; delegates every other key to ``next`` if given."""

    def __init__(self, master_key: str | None, next: Authenticator | None = None) -> None:
        self._master = master_key.encode() if master_key else None
        self._next = next
        self._principal = Principal(key_id="master", role="master")

    def authenticate(self, token: str) -> Principal:
        # Keys are printable ASCII; anything else (non-UTF-8 header bytes arrive as surrogates)
        # is no key of ours, and must not reach an encoder that would raise.
        if not (token.isascii() and token.isprintable()):
            raise AuthenticationFailed("Invalid API key.")
        if self._master is not None and hmac.compare_digest(token.encode(), self._master):
            return self._principal
        if self._next is not None:
            return self._next.authenticate(token)
        raise AuthenticationFailed("Invalid API key.")


def looks_like_jwt(token: str) -> bool:
    """A compact JWS (``header.payload.signature``); virtual keys have no dots."""
    return token.count(".") == 2 and token.startswith("eyJ")


class JwtOrKey:
    """Sends bearer tokens shaped like a JWT to ``jwt`` and every other one to ``keys``."""

    def __init__(self, jwt: Authenticator, keys: Authenticator) -> None:
        self._jwt = jwt
        self._keys = keys

    def authenticate(self, token: str) -> Principal:
        return (self._jwt if looks_like_jwt(token) else self._keys).authenticate(token)
