"""The SSE relay: upstream events go to the client as bytes, decoded only when needed.

Only a chunk that carries a usage object is parsed (to record tokens); it is dropped when the
client did not ask for usage (we always ask the upstream for it). A client that goes away
cancels the handler, and closing the upstream response aborts the upstream request.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from aiohttp import web

from fleetgate.api.exchange import Exchange
from fleetgate.errors import FleetgateError, UpstreamError
from fleetgate.routing.dispatch import Dispatch
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["relay_stream", "sse_headers"]

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
    want_usage: bool,
    total_timeout: float,
    extra_headers: dict[str, str],
) -> web.StreamResponse:
    upstream = dispatch.response
    dep = dispatch.deployment
    itl = metrics.itl.labels(ex.alias, dep.id, dep.version)
    resp = web.StreamResponse(status=200, headers=sse_headers(dispatch, ex, extra_headers))
    first = upstream.first_event
    assert first is not None
    ex.first_token_at = last = dispatch.upstream_answered
    dep.state.observe_ttft(dispatch.upstream_answered - dispatch.upstream_started)
    try:
        await resp.prepare(request)
        if _inspect(first, ex, want_usage):
            await resp.write(first)
        ex.chunks = 1
        async with asyncio.timeout(total_timeout):
            async for event in upstream.events():
                now = time.perf_counter()
                if event.startswith(_DONE):
                    await resp.write(event)
                    break
                if not _inspect(event, ex, want_usage):
                    continue
                itl.observe(now - last)
                last = now
                ex.chunks += 1
                await resp.write(event)
        ex.last_token_at = last
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
        await _write_error(resp, err)
    finally:
        await upstream.aclose()
        dispatch.release()
    return resp


async def _write_error(resp: web.StreamResponse, error: FleetgateError) -> None:
    """After the first byte an error can only be reported inside the stream."""
    try:
        await resp.write(b"data: " + orjson.dumps(error.to_dict()) + b"\n\n")
        await resp.write(_DONE + b"\n\n")
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass
