"""What a JWT bearer looks like, next to virtual keys (which have no dots).

The authenticator chain (the master key, the console's JWT bearers for tokens shaped like a
JWT, then tenancy's key cache) is `fleetgate.core.AuthChain`; the contract (`Authenticator`,
`bearer_token`) is `fleetgate.contract.principal`."""

from __future__ import annotations

__all__ = ["looks_like_jwt"]


def looks_like_jwt(token: str) -> bool:
    """A compact JWS (``header.payload.signature``); virtual keys have no dots."""
    return token.count(".") == 2 and token.startswith("eyJ")
