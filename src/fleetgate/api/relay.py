"""The SSE relay: upstream events go to the client as bytes, decoded only when needed.

Only a chunk that carries a usage object is parsed (to record tokens); it is dropped when the
client did not ask for usage (we always ask the upstream for it). A client that goes away
cancels the handler, and closing the upstream response aborts the upstream request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from fleetgate.api.exchange import Exchange
from fleetgate.errors import FleetgateError, UpstreamError
from fleetgate.hooks import GatewayRequest, StreamEncoder, StreamFilter
from fleetgate.routing.dispatch import Dispatch
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["OpenAIStreamEncoder", "relay_stream", "sse_headers"]

_DONE = b"data: [DONE]"
_USAGE_MARKERS = (b'"usage":{', b'"usage": {')
_EMPTY_CHOICES = (b'"choices":[]', b'"choices": []')


def sse_headers(dispatch: Dispatch, ex: Exchange, extra: dict[str, str]) -> dict[str, str]:
    return {
        **extra,
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "x-request-id": ex.request_id,
        "x-fleetgate-deployment": dispatch.deployment.id,
        "x-fleetgate-overhead-ms": f"{ex.overhead_s * 1000:.3f}",
    }


def _inspect(event: bytes, ex: Exchange, want_usage: bool) -> bool:
    """Record what the event tells us; False when the event must not reach the client."""
    if not any(m in event for m in _USAGE_MARKERS):
        if b'"finish_reason":"' in event or b'"finish_reason": "' in event:
            _take_finish(event, ex)
        return True
    try:
        data = orjson.loads(event[event.index(b"{") :])
    except (ValueError, orjson.JSONDecodeError):
        return True
    if isinstance(data, dict):
        ex.take_usage(data.get("usage"))
        choices = data.get("choices")
        if choices:
            _take_finish(event, ex)
        elif not want_usage and any(m in event for m in _EMPTY_CHOICES):
            return False
    return True


def _take_finish(event: bytes, ex: Exchange) -> None:
    for marker in (b'"finish_reason":"', b'"finish_reason": "'):
        at = event.find(marker)
        if at >= 0:
            start = at + len(marker)
            ex.finish_reason = event[start : event.find(b'"', start)].decode(errors="replace")
            return


async def relay_stream(
    request: web.Request,
    dispatch: Dispatch,
    ex: Exchange,
    metrics: GatewayMetrics,
    req: GatewayRequest,
    total_timeout: float,
) -> web.StreamResponse:
    upstream = dispatch.response
    dep = dispatch.deployment
    resp = web.StreamResponse(status=200, headers=sse_headers(dispatch, ex, req.response_headers))
    encoder: StreamEncoder | None = None  # the fast path writes the upstream's own bytes
    ex.first_token_at = dispatch.upstream_answered
    dep.state.observe_ttft(dispatch.upstream_answered - dispatch.upstream_started)
    try:
        await resp.prepare(request)
        async with asyncio.timeout(total_timeout):
            if req.stream_filters or req.wire is not None:
                encoder = _encoder(req)
                await _FilteredRelay(resp, dispatch, ex, metrics, req, encoder).run()
            else:
                await _relay_bytes(resp, dispatch, ex, metrics, req.want_usage)
        if not ex.completion_tokens:
            ex.completion_tokens = ex.chunks
        await resp.write_eof()
    except asyncio.CancelledError:
        ex.status, ex.error_type = 499, "client_disconnected"
        metrics.client_disconnects.labels(ex.alias).inc()
        raise
    except (ConnectionResetError, ConnectionError):
        ex.status, ex.error_type = 499, "client_disconnected"
        metrics.client_disconnects.labels(ex.alias).inc()
    except (FleetgateError, TimeoutError) as exc:
        err = exc if isinstance(exc, FleetgateError) else UpstreamError("upstream stream timed out")
        ex.status, ex.error_type = err.status, err.type
        await _write_error(resp, err, encoder or _encoder(req))
    finally:
        await upstream.aclose(graceful=ex.upstream_done)
        dispatch.release()
    return resp


async def _relay_bytes(
    resp: web.StreamResponse,
    dispatch: Dispatch,
    ex: Exchange,
    metrics: GatewayMetrics,
    want_usage: bool,
) -> None:
    """The fast path: events go out as the bytes that came in, one write per upstream read."""
    dep = dispatch.deployment
    itl = metrics.itl.labels(ex.alias, dep.id, dep.version)
    last = dispatch.upstream_answered
    first = True
    async for batch in _all_batches(dispatch):
        now = time.perf_counter()
        out = []
        done = False
        for event in batch:
            if event.startswith(_DONE):
                out.append(event)
                done = True
                break
            if _inspect(event, ex, want_usage):
                if not first:
                    itl.observe(now - last)  # events that arrived together are 0 s apart
                first = False
                last = now
                ex.chunks += 1
                out.append(event)
        if out:
            await resp.write(out[0] if len(out) == 1 else b"".join(out))
        if done:
            break
    ex.upstream_done = True
    ex.last_token_at = last


async def _all_batches(dispatch: Dispatch) -> AsyncIterator[list[bytes]]:
    yield dispatch.response.first_batch
    async for batch in dispatch.response.batches():
        yield batch


def _decode(event: bytes) -> dict[str, Any] | None:
    at = event.find(b"{")
    if at < 0:
        return None
    try:
        value = orjson.loads(event[at:])
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def _run_filters(
    filters: list[StreamFilter], chunks: list[dict[str, Any]], start: int = 0
) -> tuple[list[dict[str, Any]], bool]:
    stop = False
    for f in filters[start:]:
        out: list[dict[str, Any]] = []
        for chunk in chunks:
            result = await f.feed(chunk)
            out.extend(result.chunks)
            stop = stop or result.stop
        chunks = out
    return chunks, stop


class _FilteredRelay:
    """Decoded path: each chunk goes through the request's stream filters."""

    def __init__(
        self,
        resp: web.StreamResponse,
        dispatch: Dispatch,
        ex: Exchange,
        metrics: GatewayMetrics,
        req: GatewayRequest,
        encoder: StreamEncoder,
    ) -> None:
        dep = dispatch.deployment
        self.resp = resp
        self.encoder = encoder
        self.dispatch = dispatch
        self.ex = ex
        self.req = req
        self.itl = metrics.itl.labels(ex.alias, dep.id, dep.version)
        self.last = dispatch.upstream_answered
        self.usage: dict[str, Any] | None = None

    async def emit(self, chunks: list[dict[str, Any]]) -> None:
        for chunk in chunks:
            now = time.perf_counter()
            self.itl.observe(now - self.last)
            self.last = now
            self.ex.chunks += 1
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    self.ex.finish_reason = str(choice["finish_reason"])
            await self.resp.write(self.encoder.chunk(chunk))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Decoded upstream chunks; usage-only chunks are kept aside."""
        async for event in self.dispatch.response.events():
            if event.startswith(_DONE):
                return
            chunk = self._take(event)
            if chunk is not None:
                yield chunk

    def _take(self, event: bytes) -> dict[str, Any] | None:
        chunk = _decode(event)
        if chunk is None:
            return None
        if isinstance(chunk.get("usage"), dict):
            self.ex.take_usage(chunk["usage"])
            if not chunk.get("choices"):
                self.usage = chunk  # sent after the filters have flushed
                return None
        return chunk

    async def run(self) -> None:
        filters = self.req.stream_filters
        stopped = False
        async for chunk in self.events():
            out, stopped = await _run_filters(filters, [chunk])
            await self.emit(out)
            if stopped:
                break
        if not stopped:
            self.ex.upstream_done = True
            for i, f in enumerate(filters):
                result = await f.finish()
                out, stop = await _run_filters(filters, result.chunks, i + 1)
                await self.emit(out)
                if result.stop or stop:
                    break
        await self.resp.write(self.encoder.end(self.usage))
        self.ex.last_token_at = self.last


def _encoder(req: GatewayRequest) -> StreamEncoder:
    return req.wire.stream() if req.wire is not None else OpenAIStreamEncoder(req.want_usage)


class OpenAIStreamEncoder:
    """OpenAI's SSE: ``data: {chunk}`` lines, the usage chunk when asked for, ``[DONE]``."""

    def __init__(self, want_usage: bool) -> None:
        self.want_usage = want_usage

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def end(self, usage: dict[str, Any] | None) -> bytes:
        tail = self.chunk(usage) if usage is not None and self.want_usage else b""
        return tail + _DONE + b"\n\n"

    def error(self, error: FleetgateError) -> bytes:
        return self.chunk(error.to_dict()) + _DONE + b"\n\n"


async def _write_error(
    resp: web.StreamResponse, error: FleetgateError, encoder: StreamEncoder
) -> None:
    """After the first byte an error can only be reported inside the stream."""
    try:
        await resp.write(encoder.error(error))
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass
