"""One ext_proc stream: one HTTP request through Envoy, seen by fleetgate as the picker.

The request path of `fleetgate.api.completions`, with Envoy sending and relaying instead of
fleetgate: the key is authenticated and the body validated as for the gateway's own routes;
the stages run ``before`` (limits and budgets reserved, input checks, prompt assembly,
admission) when the body has arrived, a reservation still in flight overlapping the pick as
it overlaps the relay's send (its refusal wins); the pick is answered with the body as the
stages left it, the alias rewritten to the picked deployment's model (and a stream asked for
its usage when Envoy sends the response body back); the response's headers say who served it
and how it went; its body (when sent) gives the usage; the stages run ``after`` (settle,
bill, audit) when the stream ends, however it ends.

With ``response_body="observed"`` the response goes to a second ext_proc filter in Envoy's
observability mode (sent, never answered: one gRPC message per chunk instead of two, and Envoy
never waits for the picker on the response): that stream finds this request by the request id
the pick set in the ``fleetgate`` metadata (``handoff``), reads the served endpoint, the status
and the usage, and settles. Nothing of the response can be changed then: the usage event the
picker asked for stays in the stream the client reads (a standard final chunk with no
choices), and the picker's response headers are not added. When no observing stream comes for
a request within ``observer_wait_s`` after its pick stream ended, it is settled as abandoned.

Billing when Envoy sends no response body (``response_body="none"``): the prompt is billed at
fleetgate's estimate and the output at the request's ``max_tokens`` (the most it could have
used), or at ``header_only_output_tokens`` when the request set none; the outcome's tag
``epp_billing`` says so. Nothing is left unbilled.

Why one module: `Exchange` is the state of one ext_proc stream, and its handlers follow Envoy's
messages in the order described above: request headers, request body (the pick), response
headers, response body, end. Every handler reads and writes the same per-stream state (the
request, its stage run, the choice, the meter, the trace, the settle flags), and in observed
mode a whole `Exchange` is handed from the pick stream to the observing stream (``handoff``).
Split into request-side and response-side modules, about fifteen private fields would pass
between two objects, and the stages' ``after``, which must run exactly once however the stream
ends (`_end`, `close`, `abandon`), would be apart from the state that decides it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from fleetgate.api.completions import gateway_request, request_trace, upstream_body
from fleetgate.api.state import GatewayState
from fleetgate.contract.flow import pass_gate
from fleetgate.contract.principal import bearer_token
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.contract.stages import StageRun
from fleetgate.epp import protocol
from fleetgate.epp.endpoints import endpoint_of
from fleetgate.epp.meter import ResponseMeter
from fleetgate.epp.picker import Choice, EndpointPicker
from fleetgate.errors import (
    FleetgateError,
    NoHealthyDeployment,
    Overloaded,
    PayloadTooLarge,
    UnsupportedEndpoint,
)
from fleetgate.http.body import decode_object
from fleetgate.providers.base import RoutedEndpoint
from fleetgate.telemetry.tracing import TRACE_HEADERS, RequestTrace

__all__ = ["EppOptions", "Exchange"]

log = logging.getLogger("fleetgate.epp")

_CONTINUE_BODY = protocol.continue_body(request=False)

ResponseBody = Literal["streamed", "none", "observed"]

_PATHS: dict[str, RoutedEndpoint] = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
}
# Request headers stages and strategies read (as the gateway's routes forward them).
_FORWARDED = frozenset(
    {
        "x-session-id",
        "x-conversation-id",
        "x-user-id",
        "x-fleetgate-priority",
        "x-fleetgate-ttft-deadline-ms",
        *TRACE_HEADERS,
    }
)


@dataclass(frozen=True, slots=True)
class EppOptions:
    """How the picker runs behind Envoy.

    ``response_body``: what Envoy's ``processing_mode.response_body_mode`` sends (``streamed``:
    every chunk, billed from usage; ``none``: headers only, billed as the module doc says;
    ``observed``: every chunk to a second filter in observability mode, billed from usage).
    ``fallbacks``: endpoints listed after the pick for Envoy's retries.
    ``wake_hold_s``: the longest a pick waits for a pool with ``wake:`` (scaled to zero,
    asleep) to come up or wake, the wake-up included.
    ``more_time_after_s``: a pick not answered by then (it waits for a pool) asks Envoy for
    `more_time_s` more on the message (``override_message_timeout``; Envoy's own
    ``message_timeout`` is 200 ms by default), which Envoy grants when its filter's
    ``max_message_timeout`` is at least `more_time_s`.
    """

    response_body: ResponseBody = "streamed"
    fallbacks: int = 0
    header_only_output_tokens: int = 256
    observer_wait_s: float = 300.0
    wake_hold_s: float = 8.0
    more_time_after_s: float = 0.1

    @property
    def more_time_s(self) -> float:
        """What a waiting pick asks Envoy for: the hold and 2 s for the reply's way back."""
        return self.wake_hold_s + 2.0


class _Ended(Exception):
    """The stream ended before the response did (client gone, Envoy reset)."""


class Exchange:
    """The state of one ext_proc stream; `handle` answers each message, `close` settles."""

    def __init__(
        self,
        gw: GatewayState,
        picker: EndpointPicker,
        options: EppOptions,
        record: Callable[[GatewayRequest], None] | None = None,
        warned: set[str] | None = None,
        handoff: dict[str, Exchange] | None = None,
    ) -> None:
        self._gw = gw
        self._warned = set() if warned is None else warned  # aliases warned about, shared
        self._picker = picker
        self._options = options
        self._record = record or gw.record
        self._headers: dict[str, str] = {}
        self._subset: list[str] | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._req: GatewayRequest | None = None
        self._run: StageRun | None = None
        self._choice: Choice | None = None
        self._meter: ResponseMeter | None = None
        self._trace: RequestTrace | None = None
        self._started = 0.0
        self.done = False
        # observed mode: picks waiting for their observing stream (request id -> exchange),
        # shared by the server's exchanges; the one this observing stream found; the timer
        # that settles a pick no observing stream came for
        self._handoff: dict[str, Exchange] = {} if handoff is None else handoff
        self._observed: Exchange | None = None
        self._waiting: asyncio.TimerHandle | None = None
        self._claimed = False
        self.settle_due = False  # the response ended: `after_reply` settles it
        self._settle = True  # settle within `handle` (False: the server calls `after_reply`)

    async def handle(self, msg: Any, *, settle: bool = True) -> Any | None:
        """The reply to one `ProcessingRequest` (None: no reply is due). ``settle=False``: the
        response's end is not settled before its reply (Envoy waits for that reply before it
        forwards the response to the client); `settle_due` says `after_reply` has it to do."""
        self._settle = settle
        kind = msg.WhichOneof("request")
        if msg.observability_mode:  # the observing filter's stream: no reply is read
            await self._observe(kind, msg)
            return None
        if kind == "request_headers":
            return self._request_headers(msg)
        if kind == "request_body":
            return await self._request_body(msg.request_body)
        if kind == "response_headers":
            return await self._response_headers(msg)
        if kind == "response_body":
            return await self._response_body(msg.response_body)
        if kind == "request_trailers":
            return protocol.trailers(request=True)
        if kind == "response_trailers":
            return protocol.trailers(request=False)
        return None

    # ------------------------------------------------------------------ request

    def _request_headers(self, msg: Any) -> Any:
        self._started = time.perf_counter()
        self._headers = protocol.header_map(msg.request_headers)
        self._subset = protocol.subset_hint(msg.metadata_context)
        if msg.request_headers.end_of_stream:  # no body (GET /v1/models): any eligible engine
            return self._bodiless()
        return protocol.continue_headers(request=True)

    def _bodiless(self) -> Any:
        self.done = True
        table = self._gw.tables.table
        seen = [endpoint_of(d) for d in table.deployments() if d.state.healthy()]
        if self._subset is not None:
            seen = [e for e in seen if e in self._subset]
        if not seen:
            return _refusal(NoHealthyDeployment("No endpoint of this pool is ready."))
        return protocol.picked(seen[:1], None, {}, on_headers=True)

    async def _request_body(self, part: Any) -> Any:
        chunk: bytes = part.body
        self._size += len(chunk)
        limit = self._gw.max_request_bytes
        if self._size > limit:
            self.done = True
            return _refusal(PayloadTooLarge(f"Request body exceeds the {limit} byte limit."))
        self._body.append(chunk)
        if not part.end_of_stream:  # streamed request body: wait for the rest
            return protocol.continue_body(request=True)
        try:
            return await self._pick(b"".join(self._body))
        except FleetgateError as exc:
            self.done = True
            return _refusal(exc)

    async def _pick(self, raw: bytes) -> Any:
        gw = self._gw
        endpoint = _PATHS.get(self._headers.get(":path", "").partition("?")[0])
        if endpoint is None:
            raise UnsupportedEndpoint("The picker routes /v1/chat/completions, /v1/completions "
                                      "and /v1/embeddings.")  # fmt: skip
        principal = gw.core.auth.authenticate(bearer_token(self._headers.get("authorization")))
        body = decode_object(raw, gw.max_request_bytes)
        headers = {k: v for k, v in self._headers.items() if k in _FORWARDED}
        affinity = gw.tables.table.affinity_headers
        headers.update((k, v) for k, v in self._headers.items() if k in affinity)
        req = gateway_request(gw, endpoint, principal, body, self._started, headers,
                               gw.core.request_ids.next(), None)  # fmt: skip
        self._req = req
        self._trace = request_trace(gw, req, endpoint)  # tracing on, or the caller's traceparent
        # overlap: a reservation still in flight (limits in Redis) is waited for after the
        # pick, as the relay waits for it after the send
        run = StageRun(gw.stages, req, self._record, overlap=True)
        try:
            await run.__aenter__()
        except BaseException:  # a refusal has ended the run itself (recorded, settled)
            await self._end(None)
            raise
        self._run = run
        if req.answer is not None:  # a response cache's answer: replayed without an engine
            return await self._cached(req.answer)
        if req.stream_filters or req.response_filters:
            _unapplied(req.alias, self._warned)
        # everything after the pick inside: a failure settles what it holds (its in-flight
        # count, its deployment's rpm / tpm hold, fallback admissions) at once
        try:
            choice = self._choice = await self._picker.choose(req, self._subset)
            await choice.hold()
            if req.gate is not None:  # the overlapped reservation decides now
                await pass_gate(req)
            upstream, for_engine = self._upstream(req, choice), self._for_engine(req)
        except FleetgateError as exc:
            # a refusal of the reservation outranks what the pick met (never admitted)
            refusal = await _gate_refusal(req)
            await self._end(refusal or exc)
            if refusal is not None:
                raise refusal from None
            raise
        except BaseException as exc:
            await self._end(exc)
            raise
        observed = self._options.response_body == "observed"
        if observed:
            self._handoff[req.request_id] = self
        return protocol.picked(choice.endpoints, upstream, for_engine,
                               request_id=req.request_id if observed else None)  # fmt: skip

    def _for_engine(self, req: GatewayRequest) -> dict[str, str]:
        """Headers the engine gets: the request id, and the attempt's trace context."""
        headers = {"x-request-id": req.request_id}
        if self._trace is not None and self._choice is not None:
            cfg = self._choice.primary.deployment.config
            attempt = self._trace.attempt(self._choice.primary.deployment.id, cfg.model,
                                          cfg.api_base, 1)  # fmt: skip
            headers.update(attempt)
        return headers

    def _upstream(self, req: GatewayRequest, choice: Choice) -> bytes:
        """The body the engine gets: the stages' body, the deployment's model name, the
        strategy's and hooks' fields, and a stream's usage asked for when it will be read."""
        pick = choice.primary
        ask_usage = req.stream and self._options.response_body != "none"
        body = dict(upstream_body(req.body, ask_usage))
        body["model"] = pick.deployment.config.model
        if pick.extra_body:
            body.update(pick.extra_body)
        req.outcome.served_by(pick.deployment)
        return orjson.dumps(body)

    async def _cached(self, answer: dict[str, Any]) -> Any:
        """A cache hit answered at once; a stream as one SSE body."""
        req = self._req
        assert req is not None
        req.outcome.take_usage(answer.get("usage"))
        await self._end(None)
        self.done = True
        if req.stream:
            data = orjson.dumps({**answer, "object": "chat.completion.chunk"})
            body = b"data: " + data + b"\n\ndata: [DONE]\n\n"
            return protocol.immediate(200, body, [("content-type", "text/event-stream")])
        return protocol.immediate(200, orjson.dumps(answer), req.response_headers.items())

    # ------------------------------------------------------------------ response

    async def _response_headers(self, msg: Any) -> Any:
        req, choice = self._req, self._choice
        if req is None or choice is None:
            return protocol.continue_headers(request=False)
        headers = protocol.header_map(msg.response_headers)
        status = _status(headers.get(":status"))
        dep = choice.served(protocol.served_endpoint(msg.metadata_context))
        out = req.outcome
        if dep is not None:
            out.served_by(dep)
        out.status = status
        out.upstream_s = time.perf_counter() - req.started
        choice.answered(status)
        stream = req.stream and headers.get("content-type", "").startswith("text/event-stream")
        strip = not req.want_usage and self._options.response_body == "streamed"
        self._meter = ResponseMeter(out, stream=stream, strip_usage=strip)
        mode = self._options.response_body
        reply = None  # observed: nothing of the response can be changed
        if mode != "observed":
            reply = protocol.response_headers(
                {
                    "x-request-id": req.request_id,
                    "x-fleetgate-deployment": out.deployment or "",
                    **req.response_headers,
                }
            )
        if msg.response_headers.end_of_stream or mode == "none":
            await self._ended()
        return reply

    async def _response_body(self, part: Any) -> Any:
        meter = self._meter
        if meter is None:
            return _CONTINUE_BODY
        end = bool(part.end_of_stream)
        changed = meter.feed(part.body, end)
        if end:
            await self._ended()
        if changed is None:
            return _CONTINUE_BODY
        return protocol.body_reply(changed)

    def chunk(self, msg: Any) -> Any | None:
        """The reply to a response body chunk that does not end the response (most of a
        streamed answer's messages; None: none is due, the observing filter's), read at once
        and without a coroutine: what `handle` does with it, less its steps."""
        if msg.observability_mode:
            found = self._observed
            if found is not None:
                found._metered(msg.response_body.body)
            return None
        return self._metered(msg.response_body.body)

    def _metered(self, body: bytes) -> Any:
        meter = self._meter
        if meter is None:
            return _CONTINUE_BODY
        changed = meter.feed(body, False)
        return _CONTINUE_BODY if changed is None else protocol.body_reply(changed)

    async def _ended(self) -> None:
        """The response ended: settled now, or after the reply is sent (`after_reply`)."""
        if self._settle:
            await self._finish()
        else:
            self.settle_due = True

    async def after_reply(self) -> None:
        """Settle a response whose end was left for after its reply (billing, the stages'
        ``after``, the pick's counts: none of it delays the client)."""
        if self.settle_due:
            self.settle_due = False
            await self._finish()

    async def _finish(self) -> None:
        req = self._req
        if req is None or self.done:
            return
        out = req.outcome
        if out.status >= 400:
            # the engine refused or failed (or Envoy could not reach it): as with the relay's
            # failed attempt, nothing was served and nothing is billed
            out.error_type = out.error_type or "upstream_error"
            if out.completion_tokens == 0:
                out.deployment = None
        elif self._options.response_body == "none" and out.completion_tokens == 0:
            out.prompt_tokens = out.prompt_tokens or req.prompt_tokens
            out.completion_tokens = req.max_tokens or self._options.header_only_output_tokens
            out.tags["epp_billing"] = "header-only: prompt estimated, output at max_tokens"
        await self._end(None)

    async def _end(self, exc: BaseException | None) -> None:
        """Settle: the stages' ``after`` (billing), the pick's counts; once."""
        self.done = True
        run, self._run = self._run, None
        choice, self._choice = self._choice, None
        try:
            if run is not None:
                try:
                    await run.__aexit__(type(exc) if exc else None, exc, None)
                except BaseException:
                    pass  # the verdict is recorded on the outcome; the reply is ours to give
        finally:
            trace, self._trace = self._trace, None
            if trace is not None:
                trace.deactivate()
            if choice is not None:
                out = self._req.outcome if self._req is not None else None
                used = (out.prompt_tokens + out.completion_tokens) if out is not None else None
                await choice.release(used or None)

    # ------------------------------------------------------------------ observed mode

    async def _observe(self, kind: str | None, msg: Any) -> None:
        """A message of the observing filter's stream, for the request it names."""
        if kind == "response_headers" and self._observed is None:
            found = self._handoff.pop(protocol.tagged_request(msg.metadata_context) or "", None)
            if found is None or found.done:
                return
            self._observed = found
            await found.observed_headers(msg)
        elif kind == "response_body" and self._observed is not None:
            await self._observed.observed_body(msg.response_body)

    async def observed_headers(self, msg: Any) -> None:
        """The response headers of this request, from the observing stream that found it:
        from now on that stream settles the request."""
        self._claimed = True
        if self._waiting is not None:  # the pick's stream ended first: no longer waited for
            self._waiting.cancel()
            self._waiting = None
        self._settle = True  # nothing waits for the observing stream
        await self._response_headers(msg)

    async def observed_body(self, part: Any) -> None:
        """A chunk of this request's response, from its observing stream."""
        await self._response_body(part)

    async def abandon(self) -> None:
        """The response did not end (its observing stream did first): settled as abandoned."""
        if not self.done:
            await self._end(asyncio.CancelledError())

    def _await_observer(self) -> None:
        """The pick stream ended before the observing stream came: settle the request as
        abandoned if none comes within ``observer_wait_s``."""
        loop = asyncio.get_running_loop()

        def expired() -> None:
            self._waiting = None
            if self._req is not None and self._handoff.get(self._req.request_id) is self:
                del self._handoff[self._req.request_id]
                loop.create_task(self._end(asyncio.CancelledError()))

        self._waiting = loop.call_later(self._options.observer_wait_s, expired)

    # ------------------------------------------------------------------ end

    @property
    def open(self) -> bool:
        """Something is still held (a stage run, a pick, an observed request): `close` has
        work to do."""
        held = self._run is not None or self._choice is not None
        return held or self._observed is not None or self.settle_due

    async def close(self) -> None:
        """The stream ended: a request not finished by then was abandoned (client gone) and is
        billed for what was relayed (`StageRun` marks it 499). In observed mode the pick's
        stream leaves the request to its observing stream (or waits for it to come)."""
        if self.settle_due:  # the response ended; its settle was left for after the reply
            await self.after_reply()
            return
        observed, self._observed = self._observed, None
        if observed is not None:  # the observing stream ended (before the response: abandoned)
            await observed.abandon()
            return
        if self._claimed:  # an observing stream has the request: it settles
            return
        req = self._req
        if not self.done and req is not None and self._handoff.get(req.request_id) is self:
            self._await_observer()
        elif not self.done and self._run is not None:
            await self._end(asyncio.CancelledError())
        elif self._choice is not None:
            await self._end(None)


async def _gate_refusal(req: GatewayRequest) -> FleetgateError | None:
    """The refusal of a reservation still in flight on ``req`` (None: none, or it passed)."""
    if req.gate is None:
        return None
    try:
        await pass_gate(req)
    except FleetgateError as exc:
        return exc
    return None


def _unapplied(alias: str, warned: set[str]) -> None:
    """Output checks and speech need the answer relayed by fleetgate: said once per alias."""
    if alias not in warned and len(warned) < 10_000:
        warned.add(alias)
        log.warning(
            "epp: the output filters of alias %r (output checks, speech) do not run when "
            "Envoy relays the answer; serve it through fleetgate's relay",
            alias,
        )


def _status(value: str | None) -> int:
    try:
        return int(value or 200)
    except ValueError:
        return 502


def _refusal(exc: FleetgateError) -> Any:
    """The error as an immediate response: the protocol's 429 for a shed request (fleetgate's
    own relay answers an overloaded pool with 503), every other status as the gateway's."""
    status = 429 if isinstance(exc, Overloaded) else exc.status
    return protocol.immediate(status, orjson.dumps(exc.to_dict()), exc.headers.items())
