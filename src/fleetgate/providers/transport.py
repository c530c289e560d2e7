"""HTTP plumbing shared by providers: pooled keep-alive connections, timeouts, error mapping.

This is the edge where aiohttp and socket exceptions become `fleetgate.errors.UpstreamError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NoReturn

import aiohttp
import orjson

from fleetgate.config.schema import TimeoutConfig
from fleetgate.errors import (
    FleetgateError,
    UpstreamBadResponse,
    UpstreamConnectError,
    UpstreamContextExceeded,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from fleetgate.providers.base import UpstreamResponse
from fleetgate.providers.connections import ConnectionPool, PooledResponse
from fleetgate.sse import SSEBatches

__all__ = [
    "ErrorMapper",
    "HttpClient",
    "map_client_error",
    "raise_upstream_error",
    "read_errors",
    "status_error",
    "streamed_response",
    "translated_stream",
]

# A stream closed gracefully before its end is read out this long, so that its keep-alive
# connection can serve the next request; past that the connection is dropped.
_DRAIN_S = 0.5

ErrorMapper = Callable[[int, bytes, Mapping[str, str]], FleetgateError]


def map_client_error(exc: BaseException, where: str) -> UpstreamError:
    """Translate an aiohttp/socket/timeout exception into the error tree."""
    if isinstance(exc, UpstreamError):
        return exc
    detail = f"{where}: {type(exc).__name__}: {exc}"  # the URL stays in the logs
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return UpstreamTimeout("The upstream timed out.", detail=detail)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamConnectError("The upstream response ended early.", detail=detail)
    if isinstance(exc, aiohttp.ClientError | OSError):
        return UpstreamConnectError(
            f"Could not reach the upstream ({type(exc).__name__}).", detail=detail
        )
    return UpstreamBadResponse(
        f"The upstream sent a response that could not be read ({type(exc).__name__}).",
        detail=detail,
    )


def raise_upstream_error(exc: BaseException, resp: PooledResponse | None, where: str) -> NoReturn:
    """Raise what ended a request to ``where`` while ``resp`` was being opened or read: the
    response is closed (its connection not kept), a cancellation or an error of the tree is
    raised as it is, anything else as `map_client_error` translates it."""
    if resp is not None:
        resp.close()
    if isinstance(exc, asyncio.CancelledError | FleetgateError):
        raise exc
    raise map_client_error(exc, where) from None


class _Batches:
    """A stream's batches after the first, read errors mapped into the error tree;
    ``ended``: read to the end. A class, not an async generator: one resumed frame per
    batch fewer."""

    __slots__ = ("_next", "_where", "ended")

    def __init__(self, batches: AsyncIterator[list[bytes]], where: str) -> None:
        self._next = batches.__anext__
        self._where = where
        self.ended = False

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> list[bytes]:
        try:
            return await self._next()
        except StopAsyncIteration:
            self.ended = True
            raise
        except FleetgateError:
            raise
        except Exception as exc:
            raise map_client_error(exc, self._where) from None


async def _raise_status(resp: PooledResponse, on_error: ErrorMapper | None) -> NoReturn:
    """An error status: its body read, the connection released, the error raised."""
    body = await resp.read()
    resp.release()
    raise (on_error or status_error)(resp.status, body, resp.headers)


def read_errors(where: str) -> Callable[[Exception], BaseException]:
    """What a stream's read errors become (`fleetgate.sse.SSEBatches`'s ``errors``): errors of
    the tree as they are, anything else as `map_client_error` translates it."""

    def translate(exc: Exception) -> BaseException:
        return exc if isinstance(exc, FleetgateError) else map_client_error(exc, where)

    return translate


def streamed_response(
    resp: PooledResponse,
    first_batch: list[bytes],
    batches: AsyncIterator[list[bytes]] | SSEBatches,
    where: str,
    *,
    status: int = 200,
) -> UpstreamResponse:
    """A streamed `UpstreamResponse` over a pooled connection: ``batches`` (the events after
    ``first_batch``) with read errors mapped into the error tree (an `SSEBatches` made with
    `read_errors` maps them itself); its closer keeps the connection for the next request
    when the stream was read to its end (or drains within half a second), and drops it
    otherwise, so the upstream sees the abort."""
    rest = batches if isinstance(batches, SSEBatches) else _Batches(batches, where)

    async def closer(graceful: bool) -> None:
        try:
            kept = rest.ended or (graceful and await resp.drain(_DRAIN_S))
        except BaseException:  # cancelled while draining (the client went away): drop it
            resp.close()
            raise
        if kept:
            resp.release()  # keep-alive: the connection serves the next request
        else:
            resp.close()  # drop the connection: the upstream sees the abort

    return UpstreamResponse(status=status, first_batch=first_batch, batches=rest, closer=closer)


async def translated_stream(
    post: Callable[[], Awaitable[tuple[PooledResponse, bytes | None]]],
    translate: Callable[[PooledResponse], AsyncIterator[list[bytes]]],
    first_token_s: float,
    where: str,
    empty: str,
) -> UpstreamResponse:
    """A streamed `UpstreamResponse` whose upstream speaks another API (Anthropic, Responses):
    ``post`` opens the stream and ``translate`` turns its bytes into chat chunk events, the
    first batch of them within ``first_token_s``; a stream that ends before any batch is
    `UpstreamBadResponse` (``empty``), any other failure as `raise_upstream_error` has it."""
    resp: PooledResponse | None = None
    try:
        async with asyncio.timeout(first_token_s):
            resp, _ = await post()
            batches = translate(resp)
            try:
                first, *leftover = await anext(batches)
            except StopAsyncIteration:
                raise UpstreamBadResponse(empty) from None
    except BaseException as exc:
        raise_upstream_error(exc, resp, where)
    return streamed_response(resp, [first, *leftover], batches, where)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After") or headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


# How engines and providers say a prompt is too long: vLLM and OpenAI ("maximum context length
# is N tokens", code context_length_exceeded), SGLang ("longer than the model's context
# length"), llama.cpp ("exceeds the available context size"), Anthropic ("prompt is too long").
_CONTEXT_EXCEEDED = re.compile(
    r"context[ _]length|context window|context size|prompt is too long|too many tokens"
    r"|maximum (?:input )?length",
    re.IGNORECASE,
)


def status_error(status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamStatusError:
    parsed: Any
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    detail = body[:200].decode("utf-8", "replace") if body else ""
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        detail = str(parsed["error"].get("message", detail))
    if status in (400, 413, 422) and _CONTEXT_EXCEEDED.search(detail):
        return UpstreamContextExceeded(
            f"upstream returned HTTP {status}: {detail}", upstream_status=status, body=parsed
        )
    return UpstreamStatusError(
        f"upstream returned HTTP {status}: {detail}".rstrip(": "),
        upstream_status=status,
        body=parsed,
        retry_after=_retry_after(headers),
    )


class HttpClient:
    """Upstream HTTP for a gateway process: the fast pool for model calls (`post`) and an
    aiohttp session for everything else (probes, side services)."""

    def __init__(self, *, limit: int = 0, keepalive_timeout: float = 60.0) -> None:
        self._limit = limit
        self._keepalive = keepalive_timeout
        self._session: aiohttp.ClientSession | None = None
        self.pool = ConnectionPool(keepalive_timeout=keepalive_timeout)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limit,
                limit_per_host=0,
                keepalive_timeout=self._keepalive,
                ttl_dns_cache=300,
                enable_cleanup_closed=False,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                json_serialize=lambda v: orjson.dumps(v).decode(),
                auto_decompress=True,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def aclose(self) -> None:
        await self.pool.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(
        self,
        url: str,
        payload: bytes,
        headers: Mapping[str, str],
        timeouts: TimeoutConfig,
        *,
        stream: bool,
        on_error: ErrorMapper | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> tuple[PooledResponse, bytes | None]:
        """POST and wait for the headers (and, unless streaming, the body).

        Error statuses are read and raised as `UpstreamStatusError`; for a stream the caller
        owns the returned response, must release it, and bounds the wait itself (the
        first-token timeout covers the headers and the first event together).
        """
        resp: PooledResponse | None = None
        try:
            if stream:  # no timeout of its own (the caller's covers the first event too)
                resp = await self.pool.post(
                    url, payload, headers, connect_timeout=timeouts.connect, extra=extra_headers
                )
                if resp.status >= 400:
                    await _raise_status(resp, on_error)
                return resp, None
            async with asyncio.timeout(timeouts.total):
                resp = await self.pool.post(
                    url, payload, headers, connect_timeout=timeouts.connect, extra=extra_headers
                )
                if resp.status >= 400:
                    await _raise_status(resp, on_error)
                body = await resp.read()
                resp.release()
                return resp, body
        except FleetgateError:
            raise
        except BaseException as exc:
            raise_upstream_error(exc, resp, url)

    async def get_ok(self, url: str, headers: Mapping[str, str], timeout_s: float) -> bool:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout_s):
                async with self.session.get(url, headers=headers) as resp:
                    await resp.read()
                    return resp.status < 500
        return False
