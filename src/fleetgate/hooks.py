"""Request stages: how limits, guardrails, multimodal processing and billing join the path.

A `Stage` sees each model request twice: ``before`` the upstream call (it may rewrite the
body or alias, add response headers, or raise a `fleetgate.errors.FleetgateError` to refuse)
and ``after`` it with the `Outcome` (settle limits, record spend, audit). Stages run
``before`` in order and ``after`` in reverse order; a stage whose ``before`` ran always gets
its ``after``, even when a later stage or the upstream failed, so reservations are released.

``after`` runs on the event loop right after the response: it must not block; queue I/O.

Example::

    class CountingStage:
        name = "counting"

        async def before(self, req: GatewayRequest) -> None:
            req.response_headers["x-seen"] = "1"

        def after(self, req: GatewayRequest, outcome: Outcome) -> None:
            print(outcome.status, outcome.completion_tokens)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleetgate.config.schema import Price
from fleetgate.routing.dispatch_hooks import DispatchHook
from fleetgate.tenancy.principal import Principal

__all__ = [
    "FilterResult",
    "GatewayRequest",
    "Outcome",
    "ResponseFilter",
    "ResponseWire",
    "Stage",
    "StageRun",
    "StreamEncoder",
    "StreamFilter",
]


@dataclass(slots=True)
class FilterResult:
    """Chunks to send now (possibly none: held back), and whether to end the stream here."""

    chunks: list[dict[str, Any]]
    stop: bool = False


class StreamFilter(Protocol):
    """Sees a chat stream's chunks (decoded) and may hold, rewrite, add or stop them.

    Stages add filters in ``before`` (``req.stream_filters``); with none the relay forwards
    bytes untouched. Usage-only chunks (empty ``choices``) bypass filters. When a filter says
    ``stop``, the upstream request is cancelled and the stream ends after its chunks.
    """

    async def feed(self, chunk: dict[str, Any]) -> FilterResult: ...

    async def finish(self) -> FilterResult:
        """The upstream ended: release what is held back (or stop)."""
        ...


class ResponseFilter(Protocol):
    """Sees (and may replace) a whole non-streaming response before the client does."""

    async def apply(self, response: dict[str, Any]) -> dict[str, Any]: ...


class StreamEncoder(Protocol):
    """Writes a chat stream's (OpenAI) chunks in the client's wire format."""

    def chunk(self, chunk: dict[str, Any]) -> bytes: ...

    def end(self, usage: dict[str, Any] | None) -> bytes:
        """The end of a complete stream; ``usage``: the usage-only chunk, if any."""
        ...

    def error(self, error: Any) -> bytes:
        """A `fleetgate.errors.FleetgateError` after the first byte."""
        ...


class ResponseWire(Protocol):
    """A client wire format other than OpenAI's (the ``/v1/messages`` front door): the
    request path stays OpenAI chat inside; responses are translated on the way out."""

    def json(self, response: dict[str, Any]) -> bytes: ...

    def stream(self) -> StreamEncoder: ...


@dataclass(slots=True)
class GatewayRequest:
    """One model request as it travels the path. Stages may change ``body`` and ``alias``."""

    request_id: str
    endpoint: str  # "chat/completions" | "completions" | "embeddings" | ...
    principal: Principal
    body: dict[str, Any]
    alias: str
    stream: bool
    want_usage: bool
    prompt_tokens: int
    max_tokens: int
    headers: dict[str, str] = field(default_factory=dict)  # selected request headers
    response_headers: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)  # per-stage scratch space
    received_at: float = 0.0  # time.time()
    stream_filters: list[StreamFilter] = field(default_factory=list)
    response_filters: list[ResponseFilter] = field(default_factory=list)
    capture_response: bool = False  # a stage wants `Outcome.response_text` (audit)
    # Consulted by the dispatcher for each attempt (prefer replicas, gate the send).
    dispatch_hooks: list[DispatchHook] = field(default_factory=list)
    wire: ResponseWire | None = None  # None: answer in OpenAI's format (the fast path)


@dataclass(slots=True)
class Outcome:
    """What happened, for settling, billing and audit."""

    status: int
    error_type: str | None = None
    alias: str = ""
    deployment: str | None = None
    version: str | None = None
    upstream_model: str | None = None
    price: Price | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    ttft_s: float | None = None
    finish_reason: str | None = None
    attempts: int = 0
    response_text: str | None = None  # filled only when a stage asked for it (audit)
    tags: dict[str, str] = field(default_factory=dict)
    cost_nusd: int | None = None  # set when not priced per token (audio by minute or character)

    @property
    def cost_usd(self) -> float:
        """Cost from the deployment's prices; cached prompt tokens at the cached price."""
        if self.cost_nusd is not None:
            return self.cost_nusd / 1_000_000_000
        if self.price is None:
            return 0.0
        p = self.price
        cached = min(self.cached_tokens, self.prompt_tokens)
        cached_rate = p.cached_input_per_mtok
        if cached_rate is None:
            cached_rate = p.input_per_mtok
        return (
            (self.prompt_tokens - cached) * p.input_per_mtok
            + cached * cached_rate
            + self.completion_tokens * p.output_per_mtok
        ) / 1_000_000


class Stage(Protocol):
    """A step of the request path around the upstream call."""

    name: str

    async def before(self, req: GatewayRequest) -> None: ...

    def after(self, req: GatewayRequest, outcome: Outcome) -> None: ...


class StageRun:
    """The stages around one request: ``before`` in order, then ``after`` in reverse for exactly
    the stages whose ``before`` completed (so a stage that reserved something always settles).

    Example::

        run = StageRun(gw.stages, req)
        try:
            await run.before()
            ...  # the upstream call
        finally:
            if run.started:
                run.after(outcome)
    """

    __slots__ = ("_ran", "req", "stages")

    def __init__(self, stages: Sequence[Stage], req: GatewayRequest) -> None:
        self.stages = stages
        self.req = req
        self._ran: list[Stage] = []

    async def before(self) -> None:
        for stage in self.stages:
            await stage.before(self.req)
            self._ran.append(stage)

    @property
    def started(self) -> bool:
        """Whether any stage's ``before`` completed (and so is owed an ``after``)."""
        return bool(self._ran)

    def after(self, outcome: Outcome) -> None:
        ran, self._ran = self._ran, []
        for stage in reversed(ran):
            stage.after(self.req, outcome)
