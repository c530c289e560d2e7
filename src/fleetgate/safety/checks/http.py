"""A small JSON-over-HTTP helper shared by the guard-model and moderation clients."""

from __future__ import annotations

from typing import Any

import aiohttp

__all__ = ["HttpClient"]


class HttpClient:
    """POSTs JSON to ``base_url + path`` with a bearer key and a total timeout.

    The session is created on first use (inside the running loop) unless one is passed in;
    a passed-in session is not closed by :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None

    async def post_json(self, path: str, payload: dict[str, Any]) -> Any:
        """The decoded JSON body; raises aiohttp.ClientError (incl. bad status) or TimeoutError."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            self.base_url + path, json=payload, headers=self._headers, timeout=self._timeout
        ) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None
