"""The SSE relay: upstream events go to the client as bytes, decoded only when needed.

Only a chunk that carries a usage object is parsed (to record tokens); it is dropped when the
client did not ask for usage (we always ask the upstream for it). What the stream tells goes
into the request's `fleetgate.contract.request.Outcome`. A client that goes away cancels the
handler, and
the end of the dispatch block (`fleetgate.routing.dispatch.Dispatcher.dispatch`) closes the
upstream response, which aborts the upstream request unless the relay saw its end.

A stream with stream filters (output checks) or a wire format of its own takes the decoded path
instead (`fleetgate.api.stream_filters.FilteredRelay`); the bytes path is here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from fleetgate.api.stream_filters import SSE_DONE, FilteredRelay, stream_encoder
from fleetgate.config.schema import TimeoutConfig
from fleetgate.contract.flow import end_reply, interrupted
from fleetgate.contract.request import GatewayRequest, Outcome, StreamEncoder
from fleetgate.errors import FleetgateError, UpstreamTimeout
from fleetgate.routing.dispatch import Dispatch
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["relay_stream", "sse_headers"]

_EMPTY_CHOICES = (b'"choices":[]', b'"choices": []')


class _CoalescedResponse(web.StreamResponse):
    """A stream whose headers leave with its first bytes (as `web.Response` does): one write
    instead of two at the start, and a stream that came whole from the upstream (headers,
    events, ``[DONE]`` and the chunked terminator) is one write in all. Only the fast path
    uses it, since it writes the first batch at once (the filtered path may hold chunks
    back, and its client should see the headers meanwhile); an aiohttp without header
    buffering ignores the attribute and sends them at the prepare, as before."""

    _send_headers_immediately = False


def sse_headers(dispatch: Dispatch, req: GatewayRequest) -> dict[str, str]:
    return {
        **req.response_headers,
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "x-request-id": req.request_id,
        "x-fleetgate-deployment": dispatch.deployment.id,
        "x-fleetgate-overhead-ms": f"{req.outcome.overhead_s * 1000:.3f}",
    }


def _inspect(event: bytes, out: Outcome, want_usage: bool) -> bool:
    """Record what the event tells us; False when the event must not reach the client."""
    if b'"usage":{' not in event and b'"usage": {' not in event:  # _USAGE_MARKERS, no genexpr
        if b'"finish_reason":"' in event or b'"finish_reason": "' in event:
            _take_finish(event, out)
        return True
    try:
        data = orjson.loads(event[event.index(b"{") :])
    except (ValueError, orjson.JSONDecodeError):
        return True
    if isinstance(data, dict):
        out.take_usage(data.get("usage"))
        choices = data.get("choices")
        if choices:
            _take_finish(event, out)
        elif not want_usage and any(m in event for m in _EMPTY_CHOICES):
            return False
    return True


def _event_id(event: bytes) -> str | None:
    """The chunk's ``id`` (the first one in the event), without decoding it."""
    for marker in (b'"id":"', b'"id": "'):
        at = event.find(marker)
        if at >= 0:
            start = at + len(marker)
            end = event.find(b'"', start)
            return event[start:end].decode(errors="replace")[:200] if end > 0 else None
    return None


def _first_id(batch: list[bytes]) -> str | None:
    """The stream's id, from its first event (every chunk of a stream carries the same)."""
    return _event_id(batch[0]) if batch else None


def _take_finish(event: bytes, out: Outcome) -> None:
    for marker in (b'"finish_reason":"', b'"finish_reason": "'):
        at = event.find(marker)
        if at >= 0:
            start = at + len(marker)
            out.finish_reason = event[start : event.find(b'"', start)].decode(errors="replace")
            return


class _IdleTimer:
    """One ``asyncio.timeout`` for both limits of a stream: it ends at the total deadline or
    after ``idle_s`` without an event, whichever comes first. The deadline is pushed forward
    as events arrive, at most every tenth of ``idle_s`` (a busy stream pays a float comparison
    per read; a silent one ends after 0.9-1x ``idle_s``)."""

    __slots__ = ("_cm", "_end", "_idle", "rearm_at")

    def __init__(self, cm: asyncio.Timeout, total_s: float, idle_s: float) -> None:
        self._cm = cm
        self._idle = idle_s
        self._end = asyncio.get_running_loop().time() + total_s
        self.rearm_at = time.perf_counter() + idle_s / 10  # callers skip `touch` before

    def touch(self, now: float) -> None:
        if now >= self.rearm_at:
            loop_now = asyncio.get_running_loop().time()
            self._cm.reschedule(min(self._end, loop_now + self._idle))
            self.rearm_at = now + self._idle / 10


async def relay_stream(
    request: web.Request,
    dispatch: Dispatch,
    req: GatewayRequest,
    metrics: GatewayMetrics,
    timeouts: TimeoutConfig,
) -> web.StreamResponse:
    """Relay the stream to the client; the outcome gets its tokens, timings and status (an
    error after the first byte goes into the stream, never raised)."""
    out = req.outcome
    dep = dispatch.deployment
    filtered = bool(req.stream_filters) or req.wire is not None
    headers = sse_headers(dispatch, req)
    resp = web.StreamResponse(headers=headers) if filtered else _CoalescedResponse(headers=headers)
    encoder: StreamEncoder | None = None  # the fast path writes the upstream's own bytes
    out.first_token_at = dispatch.upstream_answered
    dep.state.observe_ttft(dispatch.upstream_answered - dispatch.upstream_started)
    preparing: asyncio.Future[Any] | None = None
    try:
        if _prepare_handlers(request):
            # A handler may suspend the prepare: a preemption landing there must not leave
            # the headers half sent, so the prepare runs to its end regardless.
            preparing = asyncio.ensure_future(resp.prepare(request))
            await asyncio.shield(preparing)
            writer = preparing.result()
        else:
            writer = await resp.prepare(request)  # no handler: it never suspends
        async with asyncio.timeout(min(timeouts.total, timeouts.idle)) as deadline:
            idle = _IdleTimer(deadline, timeouts.total, timeouts.idle)
            if filtered:
                encoder = stream_encoder(req)
                await FilteredRelay(resp, dispatch, req, metrics, encoder, idle).run()
            else:
                assert writer is not None  # a fresh response: prepare returns its writer
                sender = _chunk_sender(request, resp, writer)
                await _relay_bytes(resp, writer, sender, dispatch, req, metrics, idle)
        out.settled = True
        if req.at_end is not None:  # an upstream that ended without [DONE]
            await end_reply(req)
        await resp.write_eof()
    except asyncio.CancelledError:
        out.settled = True
        interrupt = interrupted(req)
        if interrupt is None:
            out.status, out.error_type = 499, "client_disconnected"
            metrics.client_disconnects.labels(out.alias).inc()
            raise
        out.status, out.error_type = interrupt.status, interrupt.type
        if preparing is not None:
            await asyncio.wait([preparing])  # the headers first, then the error event
            if not preparing.cancelled() and preparing.exception() is not None:
                raise interrupt from None  # no headers went out: a whole error answer
        await _write_error(resp, req, interrupt, encoder or stream_encoder(req))
    except (ConnectionResetError, ConnectionError):
        out.settled = True
        out.status, out.error_type = 499, "client_disconnected"
        metrics.client_disconnects.labels(out.alias).inc()
    except (FleetgateError, TimeoutError) as exc:
        out.settled = True
        err = (
            exc
            if isinstance(exc, FleetgateError)
            else UpstreamTimeout(
                "The upstream stream timed out (no event within timeouts.idle, or past "
                "timeouts.total)."
            )
        )
        out.status, out.error_type = err.status, err.type
        await _write_error(resp, req, err, encoder or stream_encoder(req))
    return resp


def _prepare_handlers(request: web.Request) -> bool:
    """Whether an application of the request has ``on_response_prepare`` handlers (a loop,
    not ``any`` over a generator: this runs once per stream)."""
    for app in request.match_info.apps:
        if app.on_response_prepare:
            return True
    return False


_DRAIN_ABOVE = 1 << 16  # as aiohttp's writer: wait for a slow client above this much unsent


def _chunk_sender(
    request: web.Request, resp: web.StreamResponse, writer: AbstractStreamWriter | None
) -> Callable[[bytes], bool] | None:
    """What the relay writes after its first write (which carries the headers): one chunk of
    the chunked body straight to the client's transport, as `StreamWriter.write` frames an
    uncompressed chunked body, without its three frames and a coroutine per upstream read.
    It returns True when the client has more than `_DRAIN_ABOVE` bytes unsent (the caller
    then awaits the writer's ``drain``). None where that framing does not hold (an HTTP/1.0
    client, compression, a body-write hook): the writer's own ``write`` then."""
    transport = request.transport
    if (
        transport is None
        or writer is None
        or resp.compression
        or resp.headers.get("Transfer-Encoding") != "chunked"
        or getattr(writer, "on_body_write", None) is not None
    ):
        return None
    write, unsent = transport.write, transport.get_write_buffer_size

    def send(data: bytes) -> bool:
        if not data:  # a read with nothing to relay (an empty chunk would end the body)
            return False
        if transport.is_closing():  # the client went away (as aiohttp's writer raises)
            raise ConnectionResetError("Cannot write to closing transport")
        framed = b"%x\r\n%b\r\n" % (len(data), data)
        writer.output_size += len(framed)  # the response's body_length stays true
        write(framed)
        return unsent() > _DRAIN_ABOVE

    return send


def _no_gap(gap: float) -> None:
    """The stream's first event has no gap before it: nothing to observe."""


async def _relay_bytes(
    resp: web.StreamResponse,
    writer: AbstractStreamWriter,
    sender: Callable[[bytes], bool] | None,
    dispatch: Dispatch,
    req: GatewayRequest,
    metrics: GatewayMetrics,
    idle: _IdleTimer,
) -> None:
    """The fast path: events go out as the bytes that came in, one write per upstream read.

    The first write goes through ``writer`` and carries the headers (`_CoalescedResponse`);
    later ones through ``sender`` (`_chunk_sender`) where there is one; the one that carries
    ``[DONE]`` also ends the response (its chunked terminator goes with it), after
    ``req.at_end`` (`end_reply`) where a stage left one. The events of
    one read after its first are 0 s apart: they are counted in the inter-token histogram's
    first bucket together rather than observed one by one."""
    dep = dispatch.deployment
    out, want_usage = req.outcome, req.want_usage
    itl = metrics.itl.labels(out.alias, dep.id, dep.version)
    last = dispatch.upstream_answered
    chunks = 0
    observe_gap: Callable[[float], None] = _no_gap  # after the first event: itl.observe
    direct: Callable[[bytes], bool] | None = None  # after the first write: `sender`
    batch = dispatch.response.first_batch
    more = dispatch.response.batches().__anext__  # called directly: no generator in between
    out.response_id = _first_id(batch)
    while True:
        now = time.perf_counter()
        if now >= idle.rearm_at:
            idle.touch(now)
        send, relayed, done = _select(batch, out, want_usage)
        together = relayed - 1  # events of this read after its first: observed at 0 s
        chunks += relayed
        if together >= 0:
            observe_gap(now - last)
            observe_gap = itl.observe
            if together:
                itl.observe_times(0.0, together)
            last = now
        out.relayed = chunks
        if chunks >= out.at_chunk:
            out.reached()  # e.g. the scheduler's start of the next request at the last chunk
        if done:
            await _write_end(resp, req, b"".join(send))  # [DONE] and the end of the response
            break
        if direct is not None:
            if direct(b"".join(send)):  # one event: the same bytes, not a copy
                await writer.drain()
        else:  # the first write carries the headers (alone, if nothing to relay yet: b"");
            await writer.write(b"".join(send))  # after them b"" writes nothing
            direct = sender
        try:
            batch = await more()
        except StopAsyncIteration:
            break
    dispatch.upstream_done = True
    out.last_token_at = last


def _select(batch: list[bytes], out: Outcome, want_usage: bool) -> tuple[list[bytes], int, bool]:
    """Of one upstream read's events, those to relay (a usage-only chunk the client did not
    ask for is dropped), how many of them are chunks (not ``[DONE]``), and whether the stream
    ended (``[DONE]``: the outcome is settled, no preemption from here on)."""
    send = []
    chunks = 0
    for event in batch:
        if event.startswith(SSE_DONE):
            send.append(event)
            out.settled = True
            return send, chunks, True
        if (
            b'"usage":{' in event  # what `_inspect` looks for, tested here without a call
            or b'"finish_reason":"' in event
            or b'"usage": {' in event
            or b'"finish_reason": "' in event
        ) and not _inspect(event, out, want_usage):
            continue
        chunks += 1
        send.append(event)
    return send, chunks, False


async def _write_end(resp: web.StreamResponse, req: GatewayRequest, data: bytes) -> None:
    """The stream's last bytes with the end of the response, after ``req.at_end`` (a full
    slot's settle, before the client reads ``[DONE]``)."""
    if req.at_end is not None:
        await end_reply(req)
    await resp.write_eof(data)


async def _write_error(
    resp: web.StreamResponse, req: GatewayRequest, error: FleetgateError, encoder: StreamEncoder
) -> None:
    """After the first byte an error can only be reported inside the stream (after
    ``req.at_end``: a client may retry the moment it reads the error)."""
    try:
        if req.at_end is not None:
            await end_reply(req)
        await resp.write(encoder.error(error))
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass
