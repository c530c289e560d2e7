"""Signing keys of an identity provider: its JWKS document, fetched and kept in memory.

Validating a token never waits on the network: `JwksKeys.key` answers from the last fetch;
a token signed with a key id not seen yet asks for a refetch in the background (at most one
every ``min_refetch_s``) and is refused until it arrives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import jwt

__all__ = ["JwksKeys", "validate"]

log = logging.getLogger("fleetgate.console.jwks")

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384"]


class JwksKeys:
    def __init__(self, url: str, *, timeout_s: float = 5.0, min_refetch_s: float = 30.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.min_refetch_s = min_refetch_s
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = 0.0
        self._fetching: asyncio.Task[None] | None = None

    async def refresh(self, http: aiohttp.ClientSession) -> None:
        """Fetch the JWKS and swap the keys in (raises on failure; the old keys stay)."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with http.get(self.url, timeout=timeout) as resp:
            resp.raise_for_status()
            doc = await resp.json(content_type=None)
        keys: dict[str, jwt.PyJWK] = {}
        for raw in doc.get("keys", []) if isinstance(doc, dict) else []:
            try:
                key = jwt.PyJWK.from_dict(raw)
            except jwt.PyJWTError as exc:
                log.warning("jwks %s: a key was skipped: %s", self.url, exc)
                continue
            keys[str(raw.get("kid", ""))] = key
        self._keys = keys
        self._fetched_at = time.monotonic()

    def key(self, kid: str, http: aiohttp.ClientSession | None = None) -> jwt.PyJWK | None:
        """The key with id ``kid`` (or the only key when the token names none)."""
        if not kid and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        found = self._keys.get(kid)
        if found is None and http is not None:
            self._refetch_soon(http)
        return found

    def _refetch_soon(self, http: aiohttp.ClientSession) -> None:
        if self._fetching is not None and not self._fetching.done():
            return
        if time.monotonic() - self._fetched_at < self.min_refetch_s:
            return

        async def fetch() -> None:
            try:
                await self.refresh(http)
            except Exception as exc:
                log.warning("jwks %s: refetch failed: %s", self.url, exc)

        try:
            self._fetching = asyncio.get_running_loop().create_task(fetch())
        except RuntimeError:  # no loop (a synchronous caller): the next refresh will do
            return


def validate(
    token: str,
    keys: JwksKeys,
    *,
    audience: str | None,
    issuer: str | None,
    http: aiohttp.ClientSession | None = None,
    leeway_s: float = 30.0,
) -> dict[str, Any]:
    """The claims of a signed, unexpired token for ``audience`` from ``issuer``; raises
    `jwt.PyJWTError` otherwise."""
    header = jwt.get_unverified_header(token)
    key = keys.key(str(header.get("kid", "")), http)
    if key is None:
        raise jwt.InvalidKeyError("the token's signing key is not in the JWKS")
    options = {"require": ["exp", "iat"], "verify_aud": audience is not None}
    claims: dict[str, Any] = jwt.decode(
        token,
        key=key,
        algorithms=ALGORITHMS,
        audience=audience,
        issuer=issuer,
        leeway=leeway_s,
        options=options,  # type: ignore[arg-type]
    )
    return claims
