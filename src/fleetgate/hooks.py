"""Request stages: how limits, guardrails, multimodal processing and billing join the path.

A `Stage` sees each model request twice: ``before`` the upstream call (it may rewrite the
body or alias, add response headers, or raise a `fleetgate.errors.FleetgateError` to refuse)
and ``after`` it with the `Outcome` (settle limits, record spend, audit). Stages run
``before`` in order and ``after`` in reverse order; a stage whose ``before`` ran always gets
its ``after``, even when a later stage or the upstream failed, so reservations are released.
Every endpoint (chat, completions, embeddings, the ``/v1/messages`` front door, audio) runs
its stages through one `StageRun`.

A request is one `GatewayRequest` from the route handler to the record: what was asked (the
stages may rewrite it), its scratch space for stages (``state``), and its `Outcome`.

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

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from fleetgate.config.schema import Price
from fleetgate.errors import FleetgateError
from fleetgate.providers.base import Endpoint
from fleetgate.routing.context import pass_gate, until_refused
from fleetgate.routing.deployment import Deployment
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
    bytes untouched. Chunks pass the stages' filters inside out: a later stage's filters (the
    guardrails) before an earlier stage's (speech, conversation memory), as `StageRun` orders
    them, so nothing an output check blocks reaches what speaks or stores the reply.
    Usage-only chunks (empty ``choices``) bypass filters. When a filter says
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
class Outcome:
    """What happened to one request, filled in along the path: for settling, billing, audit,
    metrics and traces. Stages read it in ``after``."""

    status: int = 200
    error_type: str | None = None
    alias: str = ""  # the alias served (after the stages' rewrites)
    deployment: str | None = None  # set once an upstream (or audio engine) was reached
    version: str | None = None
    upstream_model: str | None = None
    price: Price | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens read from the upstream's prompt cache
    cache_write_tokens: int = 0  # prompt tokens written to it (Anthropic's cache creation)
    reasoning_tokens: int = 0  # of the completion tokens, those the model reasoned with
    latency_s: float = 0.0
    ttft_s: float | None = None
    finish_reason: str | None = None
    response_id: str | None = None  # the answer's own ``id`` (feedback names it)
    attempts: int = 0
    response_text: str | None = None  # filled only when a stage asked for it (audit)
    tags: dict[str, str] = field(default_factory=dict)
    cost_nusd: int | None = None  # set when not priced per token (audio by minute or character)
    relayed: int = 0  # stream chunks sent to the client: the output's count without usage
    # The client's response is complete, or ends on its own (an error written): nothing may
    # interrupt it any more (`GatewayRequest.interrupt`; the scheduler no longer preempts it).
    settled: bool = False
    # Timings on the gateway's clock (time.perf_counter), for metrics and the access log.
    first_token_at: float | None = None
    last_token_at: float | None = None
    upstream_s: float = 0.0  # waiting for the upstream's first answer
    overhead_s: float = 0.0  # the gateway's own time before that
    span: Any = None  # the request's `RequestTrace`: tracing on, or a caller's traceparent
    batch: bool = False  # a line of the batch lane: priced less the deployment's batch_discount

    @property
    def cost_usd(self) -> float:
        """Cost from the deployment's prices (`fleetgate.tenancy.money.cost_nusd`): prompt
        tokens read from or written to the upstream's prompt cache at their own prices."""
        if self.cost_nusd is not None:
            return self.cost_nusd / 1_000_000_000
        p = self.price
        if p is None:
            return 0.0
        cached = max(0, min(self.cached_tokens, self.prompt_tokens))
        written = max(0, min(self.cache_write_tokens, self.prompt_tokens - cached))
        cached_rate = (
            p.input_per_mtok if p.cached_input_per_mtok is None else p.cached_input_per_mtok
        )
        write_rate = (
            p.input_per_mtok
            if p.cache_write_input_per_mtok is None
            else p.cache_write_input_per_mtok
        )
        cost = (
            (self.prompt_tokens - cached - written) * p.input_per_mtok
            + cached * cached_rate
            + written * write_rate
            + self.completion_tokens * p.output_per_mtok
        ) / 1_000_000
        return cost * (1 - p.batch_discount) if self.batch else cost

    def served_by(self, dep: Deployment) -> None:
        """The upstream deployment that answered."""
        config = dep.config
        self.deployment = dep.id
        self.version = config.version
        self.upstream_model = config.model
        self.price = config.price

    def take_usage(self, usage: Any) -> None:
        """Token counts from an OpenAI ``usage`` object (ignored when malformed).

        ``prompt_tokens`` counts every prompt token; of them, those read from the upstream's
        prompt cache are ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM) or
        ``cache_read_input_tokens`` (the Anthropic names, as LiteLLM and fleetgate's Anthropic
        provider pass them on), and those written to it ``cache_creation_input_tokens`` (or
        ``prompt_tokens_details.cache_write_tokens``)."""
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens") or 0
        completion = usage.get("completion_tokens") or 0
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return
        details = usage.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        self.prompt_tokens = prompt
        self.completion_tokens = completion
        self.cached_tokens = _count(
            details.get("cached_tokens"), usage.get("cache_read_input_tokens")
        )
        self.cache_write_tokens = _count(
            usage.get("cache_creation_input_tokens"), details.get("cache_write_tokens")
        )
        out_details = usage.get("completion_tokens_details")
        if isinstance(out_details, dict):
            self.reasoning_tokens = _count(out_details.get("reasoning_tokens"))


def _count(*values: Any) -> int:
    """The first of ``values`` that is a non-negative int, else 0."""
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


@dataclass(slots=True)
class GatewayRequest:
    """One model request as it travels the path, with its `Outcome`. Stages may change
    ``body`` and ``alias``; routing reads it (`fleetgate.routing.context.RoutedRequest`)."""

    request_id: str
    endpoint: Endpoint
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
    started: float = 0.0  # time.perf_counter() when the request arrived
    stream_filters: list[StreamFilter] = field(default_factory=list)
    response_filters: list[ResponseFilter] = field(default_factory=list)
    capture_response: bool = False  # a stage wants `Outcome.response_text` (audit)
    # Consulted by the dispatcher for each attempt (prefer replicas, gate the send).
    dispatch_hooks: list[DispatchHook] = field(default_factory=list)
    wire: ResponseWire | None = None  # None: answer in OpenAI's format (the fast path)
    # A /v1/responses request: the client's Responses-only fields, for a deployment that
    # speaks the Responses API natively (`fleetgate.providers.base.UpstreamCall.responses`).
    responses: dict[str, Any] | None = None
    # A complete chat completion a stage answers with instead of the upstream (a response
    # cache hit): the route replays it, streamed or not, through the filters and the wire.
    answer: dict[str, Any] | None = None
    outcome: Outcome = field(default_factory=Outcome)
    # Set by a stage just before it cancels the request's task on purpose (the scheduler
    # preempting it): the relay ends the stream with this error, or, before the first byte,
    # the route answers it, instead of treating the cancellation as a client disconnect.
    interrupt: FleetgateError | None = None
    # Set by a stage whose interrupt may be undone before the first byte (the scheduler's
    # admission): awaited by the route, it puts the request back through that stage (it may
    # raise, e.g. shed from the queue); the route then dispatches it again. None: the client
    # gets the interrupt's error.
    requeue: Callable[[], Awaitable[None]] | None = None
    # A check a stage started but did not wait for (tenancy's reservation, in flight to Redis
    # while the request goes on): it must pass before any answer leaves. Its result is None; a
    # refusal is its exception. The dispatcher waits for it once the upstream call is sent (the
    # round trips overlap), `StageRun` before any other answer; whoever waits sets this None.
    gate: asyncio.Future[None] | None = None


class Stage(Protocol):
    """A step of the request path around the upstream call."""

    name: str

    async def before(self, req: GatewayRequest) -> None: ...

    def after(self, req: GatewayRequest, outcome: Outcome) -> None: ...


class StageRun:
    """The stages around one request, as an async context manager: ``before`` of each stage in
    order on entry, up to the stage that answers the request itself if one does (a cache hit);
    on exit, however the block (or a ``before``) ended, the outcome's end is written,
    ``record`` is called, then ``after`` in reverse for exactly the stages whose ``before``
    completed (so a stage that reserved something always settles).

    How it ended: a `fleetgate.errors.FleetgateError` gives the outcome its status and type and
    carries the stages' response headers; a cancellation is 499 ``client_disconnected``; any
    other exception is 500 ``internal_error``. The exception always propagates: the one error
    handler (``api/errors.py``) renders it (and logs the unexpected ones).

    Example::

        async with StageRun(stages, req, record=write_access_log) as outcome:
            ...  # the upstream call; fill in ``outcome``
    """

    __slots__ = ("_ran", "overlap", "record", "req", "stages")

    def __init__(
        self,
        stages: Sequence[Stage],
        req: GatewayRequest,
        record: Callable[[GatewayRequest], None] | None = None,
        *,
        overlap: bool = False,
    ) -> None:
        self.stages = stages
        self.req = req
        self.record = record  # metrics, access log, trace: before the stages' ``after``
        # True: the block sends the request upstream through the dispatcher, which waits for
        # the request's `GatewayRequest.gate` after the send; False: it is waited for here,
        # before the block runs.
        self.overlap = overlap
        self._ran: list[Stage] = []

    async def __aenter__(self) -> Outcome:
        req = self.req
        req.outcome.alias = req.alias  # as asked, should a stage refuse
        trace = req.outcome.span  # a `fleetgate.telemetry.tracing.RequestTrace`, or None
        try:
            for stage in self.stages:
                if req.answer is not None:  # a stage answered (a cache hit): nothing goes
                    break  # upstream, so the stages after it (admission) have nothing to do
                if req.gate is not None and req.gate.done():
                    # answered meanwhile: a refusal ends the request here, as it would have
                    # before these stages (no queueing for a pool slot, no further checks)
                    await pass_gate(req)
                streams = tuple(req.stream_filters) if req.stream_filters else ()
                responses = tuple(req.response_filters) if req.response_filters else ()
                # a refusal that comes while a stage waits (the admission queue) ends the wait
                if trace is None:
                    await _before(stage, req)
                else:
                    with trace.stage(stage.name):  # one span per stage, under the request's
                        await _before(stage, req)
                self._ran.append(stage)
                if streams and len(req.stream_filters) != len(streams):
                    _inner_first(req.stream_filters, streams)
                if responses and len(req.response_filters) != len(responses):
                    _inner_first(req.response_filters, responses)
            gate = req.gate
            if gate is not None and (gate.done() or not self.overlap or req.answer is not None):
                await pass_gate(req)  # answered, or nothing to overlap it with: wait for it now
        except BaseException as exc:
            verdict = await self._verdict(exc)
            self._end(verdict)
            if verdict is exc or verdict is None:
                raise
            raise verdict from None
        req.outcome.alias = req.alias
        return req.outcome

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        verdict = await self._verdict(exc) if self.req.gate is not None else exc
        self._end(verdict)
        if verdict is not exc and verdict is not None:
            raise verdict from None

    async def _verdict(self, exc: BaseException | None) -> BaseException | None:
        """How the request ended, given a gate nobody waited for: its refusal outranks what
        the request met later (it was never admitted), so it is waited for here. Not when
        the request was cancelled: the gate's stage handles a late answer in ``after``."""
        if self.req.gate is None or isinstance(exc, asyncio.CancelledError):
            return exc
        try:
            await pass_gate(self.req)
        except asyncio.CancelledError as cancelled:
            return cancelled  # cancelled while waiting: the request ends as cancelled
        except Exception as refusal:
            return refusal
        return exc

    def _end(self, exc: BaseException | None) -> None:
        req = self.req
        outcome = req.outcome
        now = time.perf_counter()
        if exc is not None:
            _failed(req, exc, now)
        outcome.latency_s = now - req.started
        if outcome.deployment is not None:  # an upstream worked on it: bill what we know
            if not outcome.prompt_tokens:
                outcome.prompt_tokens = req.prompt_tokens  # no usage (abandoned, cut): estimate
            if not outcome.completion_tokens:
                outcome.completion_tokens = outcome.relayed
        if outcome.first_token_at is not None:
            outcome.ttft_s = outcome.first_token_at - req.started
        ran, self._ran = self._ran, []
        try:
            if self.record is not None:
                self.record(req)
        finally:
            for stage in reversed(ran):
                stage.after(req, outcome)


def _before(stage: Stage, req: GatewayRequest) -> Awaitable[None]:
    """``stage.before(req)``; while ``req.gate`` is in flight, stopped by its refusal."""
    work = stage.before(req)
    gate = req.gate
    if gate is None or gate.done():
        return work
    return until_refused(gate, work)


def _inner_first(filters: list[Any], earlier: tuple[Any, ...]) -> None:
    """Put the filters the last stage added ahead of the ones earlier stages added.

    A response travels the stages inside out: the stage nearest the upstream (the last one)
    sees it first, as ``after`` runs in reverse. So what the guardrails (a later stage) hold
    back, cut or replace never reaches an earlier stage's speech synthesis or conversation
    memory. The added filters keep their own order."""
    seen = {id(f) for f in earlier}
    filters[:] = [*(f for f in filters if id(f) not in seen), *earlier]


def _failed(req: GatewayRequest, exc: BaseException, now: float) -> None:
    """Mark ``req``'s outcome with how ``exc`` ended it."""
    outcome = req.outcome
    if isinstance(exc, asyncio.CancelledError):
        outcome.status, outcome.error_type = 499, "client_disconnected"
        return
    if isinstance(exc, FleetgateError):
        outcome.status, outcome.error_type = exc.status, exc.type
        if req.response_headers:
            exc.headers.update(req.response_headers)
    elif isinstance(exc, Exception):
        outcome.status, outcome.error_type = 500, "internal_error"
    else:
        return
    if outcome.deployment is None:  # never reached an upstream: all of it was ours
        outcome.overhead_s = now - req.started
