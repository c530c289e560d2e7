"""The decoded stream path: what a stream goes through when the request has stream filters
(output checks) or a wire format of its own (``/v1/messages``).

`FilteredRelay` is the relay's (`fleetgate.api.relay.relay_stream`) path for such a stream:
each upstream event is decoded to its chunk, run through the request's stream filters (and
the filters flushed at the end), and written by the request's encoder. The replay of a
prepared answer (`fleetgate.api.replay`) runs its chunks through the same filters and
encoder. The fast path, where the upstream's bytes go out as they came, stays in the relay.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web

from fleetgate.contract.flow import end_reply
from fleetgate.contract.request import GatewayRequest, StreamEncoder, StreamFilter
from fleetgate.errors import FleetgateError
from fleetgate.routing.dispatch import Dispatch
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = [
    "SSE_DONE",
    "FilteredRelay",
    "IdleDeadline",
    "OpenAIStreamEncoder",
    "decode_event",
    "finish_filters",
    "run_filters",
    "stream_encoder",
]

SSE_DONE = b"data: [DONE]"


class IdleDeadline(Protocol):
    """The stream's deadline (`fleetgate.api.relay`'s idle timer): ``touch`` pushes it forward
    as an event arrives, once ``rearm_at`` (a ``time.perf_counter()`` instant) has passed."""

    rearm_at: float

    def touch(self, now: float) -> None: ...


def decode_event(event: bytes) -> dict[str, Any] | None:
    """The JSON object of an SSE event (``data: {...}``); None when it holds none."""
    at = event.find(b"{")
    if at < 0:
        return None
    try:
        value = orjson.loads(event[at:])
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def run_filters(
    filters: list[StreamFilter], chunks: list[dict[str, Any]], start: int = 0
) -> tuple[list[dict[str, Any]], bool]:
    """``chunks`` through ``filters[start:]`` in order; True when one of them stops the stream."""
    stop = False
    for f in filters[start:]:
        out: list[dict[str, Any]] = []
        for chunk in chunks:
            result = await f.feed(chunk)
            out.extend(result.chunks)
            stop = stop or result.stop
        chunks = out
    return chunks, stop


async def finish_filters(
    filters: list[StreamFilter], emit: Callable[[list[dict[str, Any]]], Awaitable[None]]
) -> None:
    """At the end of the stream, flush each filter in order: what one held back runs through
    the filters after it and is emitted; the first that stops ends the flush."""
    for i, f in enumerate(filters):
        result = await f.finish()
        out, stop = await run_filters(filters, result.chunks, i + 1)
        await emit(out)
        if result.stop or stop:
            break


class FilteredRelay:
    """Decoded path: each chunk goes through the request's stream filters."""

    def __init__(
        self,
        resp: web.StreamResponse,
        dispatch: Dispatch,
        req: GatewayRequest,
        metrics: GatewayMetrics,
        encoder: StreamEncoder,
        idle: IdleDeadline,
    ) -> None:
        dep = dispatch.deployment
        self.idle = idle
        self.resp = resp
        self.encoder = encoder
        self.dispatch = dispatch
        self.req = req
        self.out = req.outcome
        self.filters = req.stream_filters
        self.itl = metrics.itl.labels(self.out.alias, dep.id, dep.version)
        self.last = dispatch.upstream_answered
        self.usage: dict[str, Any] | None = None

    async def emit(self, chunks: list[dict[str, Any]]) -> None:
        for chunk in chunks:
            now = time.perf_counter()
            self.itl.observe(now - self.last)
            self.last = now
            self.out.count_relayed()
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    self.out.finish_reason = str(choice["finish_reason"])
            await self.resp.write(self.encoder.chunk(chunk))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Decoded upstream chunks; usage-only chunks are kept aside."""
        async for event in self.dispatch.response.events():
            now = time.perf_counter()
            if now >= self.idle.rearm_at:
                self.idle.touch(now)
            if event.startswith(SSE_DONE):
                return
            chunk = self._take(event)
            if chunk is not None:
                yield chunk

    def _take(self, event: bytes) -> dict[str, Any] | None:
        chunk = decode_event(event)
        if chunk is None:
            return None
        if self.out.response_id is None and isinstance(chunk.get("id"), str):
            self.out.response_id = chunk["id"]
        if isinstance(chunk.get("usage"), dict):
            self.out.take_usage(chunk["usage"])
            if not chunk.get("choices"):
                self.usage = chunk  # sent after the filters have flushed
                return None
        return chunk

    async def run(self) -> None:
        filters = self.filters
        stopped = False
        async for chunk in self.events():
            out, stopped = await run_filters(filters, [chunk])
            await self.emit(out)
            if stopped:
                break
        if not stopped:
            self.dispatch.upstream_done = True
            await finish_filters(filters, self.emit)
        self.out.settled = True  # complete: no preemption from here on
        if self.req.at_end is not None:  # a full slot's settle, before the end leaves
            await end_reply(self.req)
        await self.resp.write(self.encoder.end(self.usage))
        self.out.last_token_at = self.last


def stream_encoder(req: GatewayRequest) -> StreamEncoder:
    """How ``req``'s chunks are written: its wire format's, else OpenAI's SSE."""
    return req.wire.stream() if req.wire is not None else OpenAIStreamEncoder(req.want_usage)


class OpenAIStreamEncoder:
    """OpenAI's SSE: ``data: {chunk}`` lines, the usage chunk when asked for, ``[DONE]``."""

    def __init__(self, want_usage: bool) -> None:
        self.want_usage = want_usage

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def end(self, usage: dict[str, Any] | None) -> bytes:
        tail = self.chunk(usage) if usage is not None and self.want_usage else b""
        return tail + SSE_DONE + b"\n\n"

    def error(self, error: FleetgateError) -> bytes:
        return self.chunk(error.to_dict()) + SSE_DONE + b"\n\n"
