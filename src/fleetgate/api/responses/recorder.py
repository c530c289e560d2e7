"""`ResponsesRecorder`: the outermost stream filter of a streamed ``/v1/responses`` request.

It sees each chat chunk after every stage's filters (the output and stream checks), so its
`Turn` holds exactly what the client is sent, and stores the response (``store: true``) once
the stream ends -- normally in ``finish``, or in ``feed`` when an output check stopped the
stream (``finish_reason: content_filter``; later filters' ``finish`` is not called then) --
before the relay writes the last event.
"""

from __future__ import annotations

from typing import Any

from fleetgate.api.responses.wire import ResponsesWire
from fleetgate.contract.request import FilterResult, GatewayRequest

__all__ = ["ResponsesRecorder", "bind_recorder"]


class ResponsesRecorder:
    """`fleetgate.contract.request.StreamFilter` passing every chunk on unchanged."""

    def __init__(self, wire: ResponsesWire, req: GatewayRequest) -> None:
        self.wire = wire
        self.req = req

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        self.wire.turn.feed(chunk)
        if self.wire.turn.finish_reason == "content_filter":
            await self.wire.save(self._usage())
        return FilterResult([chunk])

    async def finish(self) -> FilterResult:
        await self.wire.save(self._usage())
        return FilterResult([])

    def _usage(self) -> dict[str, Any]:
        """The chat usage known now: the upstream's, or (a stream cut short) the estimate."""
        out = self.req.outcome
        return {
            "prompt_tokens": out.prompt_tokens or self.req.prompt_tokens,
            "completion_tokens": out.completion_tokens or out.relayed,
            "prompt_tokens_details": {"cached_tokens": out.cached_tokens},
            "cache_creation_input_tokens": out.cache_write_tokens,
            "completion_tokens_details": {"reasoning_tokens": out.reasoning_tokens},
        }


def bind_recorder(wire: ResponsesWire) -> Any:
    """The ``bind`` hook of `fleetgate.api.completions.serve` for a streamed request."""

    def bind(req: GatewayRequest) -> None:
        if req.stream:
            wire.recorded = True
            req.stream_filters.append(ResponsesRecorder(wire, req))

    return bind
