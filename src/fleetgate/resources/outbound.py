"""Outbound HTTP to side services: one `aiohttp.ClientSession` for all of them.

Side services are everything the gateway calls that is not the upstream model on the data path:
guard models and moderation endpoints, remote ASR/TTS, alert webhooks, the engines' ``/metrics``
and ``/tokenize``. They share one connection pool (`OutboundHttp`), created inside the running
loop on first use and closed once by the owner. The upstream providers keep their own tuned
pool (`fleetgate.providers.transport.HttpClient`); the image fetcher keeps its own SSRF-guarded one.

A call made inside a traced request (a guard model, ASR, TTS) carries the request's W3C
``traceparent`` (`fleetgate.telemetry.tracing.trace_config`).

Every caller passes its own timeout per request; the session keeps no cookies (a cookie set by
one side service must never reach another).

Example::

    http = OutboundHttp()
    guard = JsonService("http://guard:8000/v1", api_key="k", timeout_s=5, http=http)
    body = await guard.post_json("/completions", {"model": "m", "prompt": "..."})
    await http.aclose()
"""

from __future__ import annotations

from typing import Any

import aiohttp
import yarl

from fleetgate.telemetry.tracing import trace_config

__all__ = ["JsonService", "OutboundHttp", "ServiceStatusError"]

MAX_CONNECTIONS = 512
"""Connections open at once over all side services (each client caps its own concurrency)."""


class OutboundHttp:
    """Owns the one session for side services; `session` creates it on first use."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS) -> None:
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.sessions_opened = 0

    def session(self) -> aiohttp.ClientSession:
        """The shared session (call inside the running event loop)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.max_connections)
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                # a call made while a request's span is current carries its traceparent
                trace_configs=[trace_config()],
            )
            self.sessions_opened += 1
        return self._session

    async def aclose(self) -> None:
        """Close the session (idempotent); a later `session` call opens a new one."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class ServiceStatusError(aiohttp.ClientError):
    """A side service answered 4xx/5xx. Its text names the status and the URL (user info
    removed) and nothing else: aiohttp's `ClientResponseError` repr carries the request headers,
    the bearer key among them, and check failures are written to verdicts, audit and alerts."""

    def __init__(self, status: int, reason: str | None, url: str) -> None:
        self.status = status
        safe = yarl.URL(url).with_user(None).with_query(None)
        super().__init__(f"HTTP {status} {reason or ''} from {safe}".replace("  ", " "))


class JsonService:
    """POSTs JSON to ``base_url + path`` with a bearer key and a total timeout, on the owner's
    session ``http`` (which the owner closes: the service holds nothing of its own).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        http: OutboundHttp,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
        if api_key is not None and not isinstance(api_key, str):
            raise ValueError("api_key must be a string")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http = http

    async def post_json(self, path: str, payload: dict[str, Any]) -> Any:
        """The decoded JSON body; raises aiohttp.ClientError (a bad status as
        `ServiceStatusError`), TimeoutError, or ValueError for a body that is not JSON."""
        async with self._http.session().post(
            self.base_url + path, json=payload, headers=self._headers, timeout=self._timeout
        ) as resp:
            if resp.status >= 400:
                raise ServiceStatusError(resp.status, resp.reason, str(resp.url))
            return await resp.json(content_type=None)
