"""Fetch the bytes behind an ``image_url``: ``data:``, ``https://`` (``http://`` if allowed).

Every hop of a redirect chain is re-validated (scheme, host, resolved addresses); bodies are
streamed and the fetch aborts as soon as the size limit is passed; the whole fetch, redirects
included, has one deadline.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.resolver import DefaultResolver
from pydantic import BaseModel, Field

from fleetgate.closing import AsyncClosing
from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.netguard import AddressPolicy, GuardedResolver, parse_ip_literal

__all__ = ["FetchPolicy", "ImageFetcher", "decode_data_url"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FetchPolicy(BaseModel):
    """Limits for fetching remote images."""

    allow_http: bool = False
    allow_cidrs: list[str] = Field(default_factory=list)
    allowed_ports: list[int] | None = None
    max_bytes: int = Field(default=20 * 1024 * 1024, gt=0)
    timeout_s: float = Field(default=10.0, gt=0)
    max_redirects: int = Field(default=3, ge=0)


def decode_data_url(url: str, *, max_bytes: int, param: str | None = None) -> bytes:
    """The payload of a base64 ``data:`` URL, refusing anything over ``max_bytes``."""
    header, sep, payload = url.partition(",")
    if not sep or not header.lower().endswith(";base64"):
        raise InvalidRequest("image data URL must be base64 encoded", param=param)
    if (len(payload) * 3) // 4 > max_bytes + 3:
        raise InvalidRequest(
            f"image is larger than {max_bytes} bytes", param=param, code="image_too_large"
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest("image data URL is not valid base64", param=param) from exc
    if len(data) > max_bytes:
        raise InvalidRequest(
            f"image is larger than {max_bytes} bytes", param=param, code="image_too_large"
        )
    return data


class ImageFetcher(AsyncClosing):
    """Fetches image bytes safely. Use as ``async with ImageFetcher(policy) as fetcher``.

    Example::

        async with ImageFetcher(FetchPolicy(max_bytes=5_000_000)) as fetcher:
            data = await fetcher.fetch(url, param="messages[0].content[1].image_url")
    """

    def __init__(self, policy: FetchPolicy | None = None) -> None:
        self.policy = policy or FetchPolicy()
        self._addresses = AddressPolicy(self.policy.allow_cidrs)
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        # Its own session, not the shared side-service one (`fleetgate.resources.OutboundHttp`):
        # the URLs come from clients, so every connection must go through the SSRF-guarded
        # resolver (no private, loopback or metadata addresses unless allowed, no DNS cache
        # that a rebinding could poison), without proxies from the environment and without
        # decompression (the byte limit counts what is on the wire). The side services are
        # trusted, configured hosts that such a connector would refuse.
        if self._session is None:
            resolver = GuardedResolver(self._addresses, DefaultResolver(), None)
            connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, limit=64)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trust_env=False
            )
        return self._session

    async def fetch(self, url: str, *, param: str | None = None) -> bytes:
        """The raw bytes behind ``url``; raises :class:`InvalidRequest` when refused or failed."""
        if url.startswith("data:"):
            return decode_data_url(url, max_bytes=self.policy.max_bytes, param=param)
        try:
            async with asyncio.timeout(self.policy.timeout_s):
                return await self._fetch_following(url, param)
        except TimeoutError as exc:
            raise InvalidRequest(
                f"image URL did not answer within {self.policy.timeout_s:g}s", param=param
            ) from exc
        except InvalidRequest as exc:
            if exc.param is None:
                exc.param = param
            raise
        except aiohttp.ClientError as exc:
            raise InvalidRequest(f"image URL could not be fetched: {exc}", param=param) from exc

    async def _fetch_following(self, url: str, param: str | None) -> bytes:
        session = self._session_for_loop()
        for _hop in range(self.policy.max_redirects + 1):
            self._validate_url(url, param)
            async with session.get(
                url, allow_redirects=False, headers={"Accept": "image/*"}
            ) as resp:
                if resp.status in _REDIRECTS and "Location" in resp.headers:
                    url = urljoin(url, resp.headers["Location"])
                    continue
                if resp.status != 200:
                    raise InvalidRequest(f"image URL returned HTTP {resp.status}", param=param)
                return await self._read_limited(resp, param)
        raise InvalidRequest(
            f"image URL redirected more than {self.policy.max_redirects} times", param=param
        )

    def _validate_url(self, url: str, param: str | None) -> None:
        parts = urlsplit(url)
        allowed = {"https", "http"} if self.policy.allow_http else {"https"}
        if parts.scheme.lower() not in allowed:
            raise InvalidRequest(
                f"image URL scheme {parts.scheme!r} is not allowed ({', '.join(sorted(allowed))})",
                param=param,
            )
        host = parts.hostname
        if not host:
            raise InvalidRequest("image URL has no host", param=param)
        try:
            port = parts.port
        except ValueError as exc:
            raise InvalidRequest("image URL has an invalid port", param=param) from exc
        if self.policy.allowed_ports is not None and port is not None:
            if port not in self.policy.allowed_ports:
                raise InvalidRequest(f"image URL port {port} is not allowed", param=param)
        literal = parse_ip_literal(host)
        # aiohttp skips the resolver for IP literals, so they are checked here.
        if literal is not None:
            self._addresses.check(literal, param=param)

    async def _read_limited(self, resp: aiohttp.ClientResponse, param: str | None) -> bytes:
        limit = self.policy.max_bytes
        if resp.content_length is not None and resp.content_length > limit:
            raise InvalidRequest(
                f"image is larger than {limit} bytes", param=param, code="image_too_large"
            )
        chunks: list[bytes] = []
        total = 0
        async for chunk in resp.content.iter_chunked(64 * 1024):
            total += len(chunk)
            if total > limit:
                raise InvalidRequest(
                    f"image is larger than {limit} bytes", param=param, code="image_too_large"
                )
            chunks.append(chunk)
        return b"".join(chunks)
