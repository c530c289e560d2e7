"""The shared half of the OpenAI-compatible side services (transcription, speech): the
process's side-service session (`fleetgate.resources.OutboundHttp`), a concurrency cap, a time
limit, and errors mapped into the tree."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from fleetgate.errors import UpstreamConnectError, UpstreamStatusError, UpstreamTimeout
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["SideServiceClient"]


class SideServiceClient:
    """POSTs to ``base_url + path`` of an OpenAI-compatible upstream."""

    service = "upstream"  # named in error messages
    path = "/"  # the endpoint under base_url, set by each service

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout_s: float = 60.0,
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        self.url = base_url.rstrip("/") + self.path
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._limit = asyncio.Semaphore(concurrency)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http = http

    async def _post(self, **kwargs: Any) -> bytes:
        """POST (``data=`` or ``json=``) within the concurrency cap; the body of a 2xx answer."""
        async with self._limit:
            try:
                async with self._http.session().post(
                    self.url, headers=self._headers, timeout=self._timeout, **kwargs
                ) as resp:
                    data = await resp.read()
            except TimeoutError as exc:
                raise UpstreamTimeout(f"{self.service} upstream timed out") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamConnectError(
                    f"The {self.service} upstream failed ({type(exc).__name__}).",
                    detail=f"{self.service} upstream failed: {exc}",
                ) from exc
        if resp.status >= 400:
            raise UpstreamStatusError(
                f"{self.service} upstream answered {resp.status}",
                upstream_status=resp.status,
                body=self._error_body(data),
            )
        return data

    def _error_body(self, data: bytes) -> Any:
        return data.decode(errors="replace")

    async def aclose(self) -> None:
        """Nothing of its own to close: the session is the resource owner's."""
