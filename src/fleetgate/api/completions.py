"""``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``: the request path.

authenticate → parse and validate → stages (`fleetgate.contract.stages.StageRun`) → route
(retries, fallbacks) → relay → record. One `fleetgate.contract.request.GatewayRequest` carries
the request and its outcome through all of it; where it turns (a gate, an interrupt, a
requeue, a cached answer) is `fleetgate.contract.flow`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from fleetgate.api.capture import ResponseCapture, response_text
from fleetgate.api.relay import relay_stream
from fleetgate.api.replay import replay_answer
from fleetgate.api.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    validate_request,
)
from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.config.schema import TimeoutConfig
from fleetgate.contract.flow import respond
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, ResponseWire
from fleetgate.contract.stages import StageRun
from fleetgate.errors import FleetgateError, InvalidRequest, UpstreamBadResponse
from fleetgate.http.body import read_json
from fleetgate.providers.base import RoutedEndpoint, UpstreamCall
from fleetgate.routing.context import Pick
from fleetgate.routing.dispatch import Dispatch
from fleetgate.telemetry.tracing import TRACE_HEADERS, RequestTrace
from fleetgate.tokens import estimate_prompt_tokens

__all__ = [
    "answer",
    "chat_completions",
    "completions",
    "embeddings",
    "gateway_request",
    "request_trace",
    "serve",
    "upstream_body",
]

_SCHEMAS: dict[RoutedEndpoint, type[BaseModel]] = {
    Endpoint.CHAT: ChatCompletionRequest,
    Endpoint.COMPLETIONS: CompletionRequest,
    Endpoint.EMBEDDINGS: EmbeddingRequest,
}


def _handler(endpoint: RoutedEndpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The route handler of ``endpoint``: authenticate, read the body, `serve` (one frame,
    which every event of a stream resumes, instead of a handler calling a helper)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        gw = request.app[GATEWAY]
        principal = gw.core.auth.authenticate_request(request.headers)
        body = await read_json(request, gw.max_request_bytes, gw.body_timeout_s)
        return await serve(request, gw, endpoint, principal, body, started)

    handle.__name__ = handle.__qualname__ = f"{endpoint.name.lower()}_handler"
    return handle


chat_completions = _handler(Endpoint.CHAT)
completions = _handler(Endpoint.COMPLETIONS)
embeddings = _handler(Endpoint.EMBEDDINGS)


# Request headers that stages may read (session affinity, conversation ids, debug flags, the
# scheduler's priority and TTFT deadline).
_FORWARDED = frozenset(
    {
        "x-session-id",
        "x-conversation-id",
        "x-fleetgate-debug",
        "x-user-id",
        "x-request-id",
        "x-fleetgate-priority",
        "x-fleetgate-ttft-deadline-ms",
        *TRACE_HEADERS,  # the caller's W3C trace context: continued and sent to the engine
    }
)


def _selected_headers(request: web.Request, affinity: frozenset[str]) -> dict[str, str]:
    """The request headers stages and the router read, with lower-case names (the last value
    of a repeated one). Looked up by name (case-insensitive, no copy of each name lowered):
    most requests carry none of them."""
    headers = request.headers
    out = {}
    for name in _FORWARDED:
        if name in headers:
            out[name] = headers.getall(name)[-1]
    for name in affinity:  # lower-case already (`RouteTable.affinity_headers`)
        if name not in out and name in headers:
            out[name] = headers.getall(name)[-1]
    return out


def upstream_body(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The body every attempt starts from: always ask a stream for its usage."""
    if not stream:
        return body
    out = dict(body)
    options = body.get("stream_options")
    out["stream_options"] = {**(options or {}), "include_usage": True}
    return out


async def serve(
    request: web.Request,
    gw: GatewayState,
    endpoint: RoutedEndpoint,
    principal: Principal,
    body: dict[str, Any],
    started: float,
    wire: ResponseWire | None = None,
    bind: Callable[[GatewayRequest], None] | None = None,
) -> web.StreamResponse:
    """The request path after authentication and parsing; ``wire`` answers in another format
    (the ``/v1/messages`` and ``/v1/responses`` front doors); ``bind`` sees the request before
    the stages (a stream filter it adds is the outermost: it sees what the client is sent)."""
    req = gateway_request(
        gw,
        endpoint,
        principal,
        body,
        started,
        _selected_headers(request, gw.tables.table.affinity_headers),
        gw.core.request_ids.next(),
        wire,
    )
    if bind is not None:
        bind(req)
    traced = gw.tracer.enabled or "traceparent" in req.headers  # rarely: no call otherwise
    trace = request_trace(gw, req, endpoint) if traced else None
    try:
        # overlap: a reservation still in flight is waited for once the upstream call is sent
        async with StageRun(gw.stages, req, gw.record, overlap=True):
            return await _dispatch(request, gw, req, endpoint)
    finally:
        if trace is not None:
            trace.deactivate()


async def answer(
    gw: GatewayState,
    endpoint: RoutedEndpoint,
    principal: Principal,
    body: dict[str, Any],
    *,
    request_id: str,
    headers: dict[str, str],
    batch: bool = False,
) -> tuple[int, dict[str, Any]]:
    """The request path for a request that did not arrive over HTTP (a batch line): the same
    validation, stages (limits, guardrails, admission, billing), routing and record, answered
    as JSON only. Returns (status, body); a refusal or failure is its OpenAI error body.

    ``request_id`` is the caller's own (the batch lane's is the same for a line replayed after
    a restart, so its spend record is written once); ``headers``: the request headers stages
    read (``x-fleetgate-priority``, ...), lower-case; ``batch``: priced with the deployment's
    ``batch_discount``.
    """
    started = time.perf_counter()
    try:
        if body.get("stream") is True:
            raise InvalidRequest("This request cannot stream.", param="stream")
        req = gateway_request(gw, endpoint, principal, body, started, headers, request_id, None)
        req.outcome.batch = batch
        trace = request_trace(gw, req, endpoint)
        try:
            async with StageRun(gw.stages, req, gw.record, overlap=True):
                response = await _dispatch(None, gw, req, endpoint)
        finally:
            if trace is not None:
                trace.deactivate()
    except FleetgateError as exc:
        return exc.status, exc.to_dict()
    raw = response.body if isinstance(response, web.Response) else None
    try:
        data = orjson.loads(raw) if isinstance(raw, bytes) else None
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return 502, UpstreamBadResponse("The upstream's answer was not a JSON object.").to_dict()
    return response.status, data


def gateway_request(
    gw: GatewayState,
    endpoint: RoutedEndpoint,
    principal: Principal,
    body: dict[str, Any],
    started: float,
    headers: dict[str, str],
    request_id: str,
    wire: ResponseWire | None,
) -> GatewayRequest:
    """The request the stages and the router see, from a parsed body (validated here: a
    bad body, or an alias the key may not use, is refused); ``headers``: the request
    headers stages read, lower-case; ``request_id``: fleetgate's own. Used by every front
    door that is not an aiohttp route of its own (a batch line, ``fleetgate epp``)."""
    validate_request(
        ChatCompletionRequest if endpoint is Endpoint.CHAT else _SCHEMAS[endpoint], body
    )
    alias: str = body["model"]
    gw.check_model(principal, alias)
    stream = endpoint is not Endpoint.EMBEDDINGS and body.get("stream") is True
    options = body.get("stream_options")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return GatewayRequest(
        # Our own id, never the HTTP caller's: spend is idempotent on it, and a caller that
        # could choose it could replay requests without paying for them.
        request_id=request_id,
        endpoint=endpoint,
        principal=principal,
        body=body,
        alias=alias,
        stream=stream,
        want_usage=stream and isinstance(options, dict) and options.get("include_usage") is True,
        prompt_tokens=estimate_prompt_tokens(body),
        max_tokens=max_tokens if isinstance(max_tokens, int) else 0,
        headers=headers,
        received_at=time.time(),
        started=started,
        wire=wire,
    )


def request_trace(
    gw: GatewayState, req: GatewayRequest, endpoint: RoutedEndpoint
) -> RequestTrace | None:
    """The request's trace (None: tracing off and no caller context), current in this task."""
    if not gw.tracer.enabled and "traceparent" not in req.headers:
        return None  # the common case, without building the span's attributes
    trace = gw.tracer.request(
        "chat" if endpoint is Endpoint.CHAT else endpoint.value,
        req.alias,
        {
            "gen_ai.request.max_tokens": req.max_tokens or None,
            "fleetgate.request_id": req.request_id,
        },
        req.headers,
    )
    if trace is not None:
        req.outcome.span = trace
        trace.activate()
    return trace


def _dispatch(
    request: web.Request | None, gw: GatewayState, req: GatewayRequest, endpoint: RoutedEndpoint
) -> Awaitable[web.StreamResponse]:
    """The answer after the stages: a stage's own (a response cache hit) replayed, else the
    upstream's, sent again after a requeue (`fleetgate.contract.flow.respond`). Not a
    coroutine itself: the caller awaits `respond` directly, a frame fewer for every event."""
    upstream = _Upstream(request, gw, req, endpoint)
    return respond(req, upstream.send, upstream.replay)


class _Upstream:
    """One request's send upstream (routing, retries, fallbacks, relay): `send` dispatches
    again on each call, `build` makes each attempt's call, `replay` sends a stage's own
    answer. One object per request where closures needed a cell per variable they shared."""

    __slots__ = ("attempts", "base", "endpoint", "gw", "req", "request", "routing", "timeouts")

    def __init__(
        self,
        request: web.Request | None,
        gw: GatewayState,
        req: GatewayRequest,
        endpoint: RoutedEndpoint,
    ) -> None:
        self.request = request
        self.gw = gw
        self.req = req
        self.endpoint = endpoint
        self.base = upstream_body(req.body, req.stream)
        self.timeouts = gw.dispatcher.config.timeouts
        self.attempts = 0
        self.routing = False

    def build(self, pick: Pick) -> UpstreamCall:
        req = self.req
        dep = pick.deployment
        call_body = dict(self.base)
        call_body["model"] = dep.config.model
        if pick.extra_body:  # fields the strategy chose for this deployment (e.g. cache_salt)
            call_body.update(pick.extra_body)
        headers = {"x-request-id": req.request_id}
        trace: RequestTrace | None = req.outcome.span
        if trace is not None:  # this attempt's span travels to the engine as traceparent
            self.attempts += 1
            cfg = dep.config
            headers.update(trace.attempt(dep.id, cfg.model, cfg.api_base, self.attempts))
        return UpstreamCall(
            self.endpoint,
            call_body,
            req.stream,
            dep.config.timeouts or self.timeouts,
            headers,
            req.responses,
        )

    def send(self) -> Awaitable[web.StreamResponse]:  # `respond` awaits the dispatch itself
        req = self.req
        trace: RequestTrace | None = req.outcome.span
        if trace is not None and not self.routing:  # once, however often it is sent
            self.routing = True
            trace.routing_started(req.alias)
        return _dispatch_upstream(self.request, self.gw, req, self.build, self.timeouts)

    def replay(self) -> Awaitable[web.StreamResponse]:
        return replay_answer(self.request, self.req, self.gw.metrics)


async def _dispatch_upstream(
    request: web.Request | None,
    gw: GatewayState,
    req: GatewayRequest,
    build: Callable[[Pick], UpstreamCall],
    timeouts: TimeoutConfig,
) -> web.StreamResponse:
    out = req.outcome
    stream = req.stream
    async with gw.dispatcher.dispatch(gw.tables.table, req, build) as dispatch:
        out.served_by(dispatch.deployment)
        out.attempts = dispatch.attempts
        out.upstream_s = dispatch.upstream_answered - dispatch.upstream_started
        if stream and request is not None:
            out.overhead_s = dispatch.upstream_started - req.started
            capture = ResponseCapture() if req.capture_response else None
            if capture is not None:
                req.stream_filters.append(capture)
            req.requeue = None  # from here on the client gets bytes: never sent again
            try:
                deployment_timeouts = dispatch.deployment.config.timeouts or timeouts
                return await relay_stream(request, dispatch, req, gw.metrics, deployment_timeouts)
            finally:
                out.settled = True  # the dispatch block's end (a drain) is not preemptible
                if capture is not None:
                    out.response_text = capture.text
        return await _json_response(dispatch, req)


async def _json_response(dispatch: Dispatch, req: GatewayRequest) -> web.Response:
    out = req.outcome
    dispatch.deployment.state.observe_response(out.upstream_s)  # the latency strategy learns
    data = dispatch.response.json()
    out.take_usage(data.get("usage"))
    body = dispatch.response.body
    if req.response_filters:
        for f in req.response_filters:
            data = await f.apply(data)
        body = orjson.dumps(data)
    if req.wire is not None:
        body = req.wire.json(data)
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        out.finish_reason = choices[0].get("finish_reason")
    rid = data.get("id")
    out.response_id = rid if isinstance(rid, str) else None
    if req.capture_response:
        out.response_text = response_text(data)
    out.overhead_s = time.perf_counter() - req.started - out.upstream_s
    return web.Response(
        body=body,
        content_type="application/json",
        headers={
            "x-request-id": req.request_id,
            "x-fleetgate-deployment": dispatch.deployment.id,
            "x-fleetgate-overhead-ms": f"{out.overhead_s * 1000:.3f}",
            **req.response_headers,
        },
    )
