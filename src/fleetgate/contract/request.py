"""The request contract: what one model request is and what happened to it.

A request is one `GatewayRequest` from the route handler to the record: what was asked (the
stages may rewrite it), its scratch space for stages (``state``), and its `Outcome`. It is the
ground floor of the gateway: every floor above (routing, tenancy, the features, the routes)
reads and writes it, and this module imports nothing of theirs. What it needs of them it names
here as a Protocol (`Prices`, `Served`) or takes from the other contract modules:

- `fleetgate.contract.principal`: who is calling (`Principal`, `Authenticator`);
- `fleetgate.contract.stages`: `Stage` and `StageRun`, the steps around the upstream call;
- `fleetgate.contract.dispatch`: `DispatchHook`, a stage's say in replica choice and sending;
- `fleetgate.contract.flow`: the request's control flow (gate, interrupt, requeue, cached
  answer), each in one function.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleetgate.contract.dispatch import DispatchHook
from fleetgate.contract.principal import Principal
from fleetgate.contract.tool import ToolCall
from fleetgate.errors import FleetgateError

NEVER = 1 << 62  # `Outcome.at_chunk` with no hook: no stream relays that many chunks

__all__ = [
    "Endpoint",
    "FilterResult",
    "GatewayRequest",
    "Outcome",
    "Prices",
    "ResponseFilter",
    "ResponseWire",
    "Served",
    "StreamEncoder",
    "StreamFilter",
]


class Endpoint(enum.Enum):
    """The gateway's endpoints (the path under ``/v1``); the first three are routed to
    providers, the audio ones to the multimodal engines; ``MCP``: a call to a tool server
    (`fleetgate.contract.tool.ToolCall` in `GatewayRequest.tool`)."""

    CHAT = "chat/completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    AUDIO_TRANSCRIPTIONS = "audio/transcriptions"
    AUDIO_SPEECH = "audio/speech"
    MCP = "mcp"


class Prices(Protocol):
    """A deployment's prices per million tokens (`fleetgate.config.schema.Price` is one)."""

    @property
    def input_per_mtok(self) -> float: ...

    @property
    def output_per_mtok(self) -> float: ...

    @property
    def cached_input_per_mtok(self) -> float | None:
        """Prompt tokens read from the upstream's prompt cache (None: the input price)."""
        ...

    @property
    def cache_write_input_per_mtok(self) -> float | None:
        """Prompt tokens written to it (None: the input price)."""
        ...

    @property
    def batch_discount(self) -> float:
        """Share of the price taken off requests of the batch lane."""
        ...


class ServedConfig(Protocol):
    """What `Outcome.served_by` reads of a deployment's config."""

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def price(self) -> Prices: ...


class Served(Protocol):
    """The upstream deployment that answered (`fleetgate.routing.deployment.Deployment` is
    one), as far as the outcome records it."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> ServedConfig: ...


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
    price: Prices | None = None
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
    # When ``relayed`` reaches ``at_chunk`` the relay calls ``on_chunk`` once (`reached`): the
    # scheduler's start of the next request as a stream reaches its last chunk.
    at_chunk: int = NEVER
    on_chunk: Callable[[], None] | None = None
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
    # The audit's word for how it ended where the path named one (a tool call's ``masked``,
    # ``blocked`` or ``refused_tool``); None: from the status.
    decision: str | None = None

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

    def count_relayed(self, chunks: int = 1) -> None:
        """``chunks`` more stream chunks sent to the client; at ``at_chunk``, `reached`."""
        self.relayed += chunks
        if self.relayed >= self.at_chunk:
            self.reached()

    def reached(self) -> None:
        """``relayed`` reached ``at_chunk``: ``on_chunk`` runs, once."""
        hook, self.on_chunk, self.at_chunk = self.on_chunk, None, NEVER
        if hook is not None:
            hook()

    def served_by(self, dep: Served) -> None:
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
        if (
            not details
            and "cache_read_input_tokens" not in usage
            and "cache_creation_input_tokens" not in usage
            and "completion_tokens_details" not in usage
        ):  # counts only (most upstreams): none of the fields below to look for
            self.cached_tokens = self.cache_write_tokens = 0
            return
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
    ``body`` and ``alias``; routing reads it (`fleetgate.routing.context.RoutedRequest`).

    Six fields carry the request's control flow, each handled in `fleetgate.contract.flow`:
    ``gate`` (a check in flight), ``interrupt`` (a cancellation on purpose), ``requeue`` (the
    way back into a stage's queue after one), ``answer`` (a stage's own answer),
    ``reply_after`` (what the reply waits for) and ``at_end`` (what runs before a stream's
    end leaves)."""

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
    dispatch_hooks: list[DispatchHook[Any]] = field(default_factory=list)
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
    # What must be done before the reply leaves (tenancy's settle of a reservation that held a
    # full parallel slot: the client's next request, on any replica, may need that slot);
    # `StageRun` waits for them, bounded, once the stages' ``after`` ran (`hold_reply`).
    reply_after: list[asyncio.Future[Any]] | None = None
    # What runs once a streamed answer is complete, just before its end leaves (OpenAI's
    # ``[DONE]``, a wire's last event, an error event): tenancy settles a reservation that held
    # a full parallel slot here, so a client that sends its next request the moment it reads
    # the end finds the slot free on any replica. `fleetgate.contract.flow.end_reply` runs them
    # once and waits for what they added to ``reply_after``; a JSON answer needs none (its
    # stages' ``after`` run before it is written).
    at_end: list[Callable[[GatewayRequest], None]] | None = None
    # A call to a tool server instead of a model (endpoint ``MCP``): what the stages check,
    # limit and bill (`fleetgate.contract.tool`).
    tool: ToolCall | None = None
