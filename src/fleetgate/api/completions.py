"""``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``: the request path.

authenticate → parse and validate → route (retries, fallbacks) → relay → record.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from fleetgate.api.capture import ResponseCapture, response_text
from fleetgate.api.exchange import Exchange, record_exchange
from fleetgate.api.relay import relay_stream
from fleetgate.api.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    validate_request,
)
from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.errors import FleetgateError
from fleetgate.hooks import GatewayRequest, ResponseWire, StageRun
from fleetgate.http.body import read_json
from fleetgate.providers.base import Endpoint, UpstreamCall
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch import Dispatch
from fleetgate.routing.strategies import RouteContext
from fleetgate.tenancy.auth import bearer_token
from fleetgate.tenancy.principal import Principal
from fleetgate.tokens import estimate_prompt_tokens

__all__ = ["chat_completions", "completions", "embeddings", "serve"]

_SCHEMAS: dict[Endpoint, type[BaseModel]] = {
    Endpoint.CHAT: ChatCompletionRequest,
    Endpoint.COMPLETIONS: CompletionRequest,
    Endpoint.EMBEDDINGS: EmbeddingRequest,
}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, Endpoint.CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, Endpoint.COMPLETIONS)


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await _serve(request, Endpoint.EMBEDDINGS)


# Request headers that stages may read (session affinity, conversation ids, debug flags).
_FORWARDED = frozenset(
    {"x-session-id", "x-conversation-id", "x-fleetgate-debug", "x-user-id", "x-request-id"}
)


def _selected_headers(request: web.Request, affinity: frozenset[str]) -> dict[str, str]:
    """The request headers stages and the router read, with lower-case names."""
    out = {}
    for name, value in request.headers.items():
        lowered = name.lower()
        if lowered in _FORWARDED or lowered in affinity:
            out[lowered] = value
    return out


def _upstream_body(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The body every attempt starts from: always ask a stream for its usage."""
    if not stream:
        return body
    out = dict(body)
    options = body.get("stream_options")
    out["stream_options"] = {**(options or {}), "include_usage": True}
    return out


async def _serve(request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
    started = time.perf_counter()
    gw = request.app[GATEWAY]
    principal = gw.auth.authenticate(bearer_token(request.headers.get("Authorization")))
    body = await read_json(request, gw.max_request_bytes, gw.body_timeout_s)
    return await serve(request, gw, endpoint, principal, body, started)


async def serve(
    request: web.Request,
    gw: GatewayState,
    endpoint: Endpoint,
    principal: Principal,
    body: dict[str, Any],
    started: float,
    wire: ResponseWire | None = None,
) -> web.StreamResponse:
    """The request path after authentication and parsing; ``wire`` answers in another format
    (the ``/v1/messages`` front door)."""
    validate_request(_SCHEMAS[endpoint], body)
    alias: str = body["model"]
    gw.check_model(principal, alias)
    stream = endpoint is not Endpoint.EMBEDDINGS and body.get("stream") is True
    options = body.get("stream_options")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    req = GatewayRequest(
        # Our own id, never the caller's: spend is idempotent on it, and a caller that could
        # choose it could replay requests without paying for them.
        request_id=gw.request_ids.next(),
        endpoint=endpoint.value,
        principal=principal,
        body=body,
        alias=alias,
        stream=stream,
        want_usage=stream and isinstance(options, dict) and options.get("include_usage") is True,
        prompt_tokens=estimate_prompt_tokens(body),
        max_tokens=max_tokens if isinstance(max_tokens, int) else 0,
        headers=_selected_headers(request, gw.tables.table.affinity_headers),
        received_at=time.time(),
        wire=wire,
    )
    ex = Exchange(req.request_id, endpoint, alias, principal, started, stream)
    ex.client_request_id = req.headers.get("x-request-id")
    run = StageRun(gw.stages, req)
    try:
        await run.before()
        ex.alias = req.alias
        return await _dispatch(request, gw, req, ex, endpoint)
    except asyncio.CancelledError:
        if ex.deployment is None:
            ex.status, ex.error_type = 499, "client_disconnected"
            _record(gw, ex)
        raise
    except FleetgateError as exc:
        if ex.deployment is None:
            ex.status, ex.error_type = exc.status, exc.type
            ex.overhead_s = time.perf_counter() - started
            _record(gw, ex)
        if req.response_headers:
            exc.headers.update(req.response_headers)
        raise
    finally:
        if run.started:
            run.after(ex.outcome())


async def _dispatch(
    request: web.Request,
    gw: GatewayState,
    req: GatewayRequest,
    ex: Exchange,
    endpoint: Endpoint,
) -> web.StreamResponse:
    table = gw.tables.table
    ctx = RouteContext(
        alias=req.alias,
        principal=req.principal,
        prompt_tokens=req.prompt_tokens,
        max_tokens=req.max_tokens,
        session_id=req.headers.get("x-session-id"),
        body=req.body,
        headers=req.headers,
        dispatch_hooks=tuple(req.dispatch_hooks),
    )
    base = _upstream_body(req.body, req.stream)
    timeouts = gw.dispatcher.config.timeouts
    forward = {"x-request-id": req.request_id}
    stream = req.stream

    def build(dep: Deployment) -> UpstreamCall:
        call_body = dict(base)
        call_body["model"] = dep.config.model
        if ctx.extra_body:  # fields the strategy chose for this deployment (e.g. cache_salt)
            call_body.update(ctx.extra_body)
        return UpstreamCall(endpoint, call_body, stream, dep.config.timeouts or timeouts, forward)

    if gw.tracer.enabled:
        ex.span = gw.tracer.start(
            "chat" if endpoint is Endpoint.CHAT else endpoint.value,
            req.alias,
            {
                "gen_ai.request.max_tokens": req.max_tokens or None,
                "fleetgate.request_id": req.request_id,
            },
        )
    dispatch = await gw.dispatcher.send(table, ctx, build)
    ex.deployment = dispatch.deployment
    ex.attempts = dispatch.attempts
    ex.upstream_s = dispatch.upstream_answered - dispatch.upstream_started
    if stream:
        ex.overhead_s = dispatch.upstream_started - ex.started
        capture = ResponseCapture() if req.capture_response else None
        if capture is not None:
            req.stream_filters.append(capture)
        try:
            return await relay_stream(request, dispatch, ex, gw.metrics, req, timeouts.total)
        finally:
            if capture is not None:
                ex.response_text = capture.text
            _record(gw, ex)
    return await _json_response(gw, dispatch, ex, req)


async def _json_response(
    gw: GatewayState, dispatch: Dispatch, ex: Exchange, req: GatewayRequest
) -> web.Response:
    try:
        data = dispatch.response.json()
        ex.take_usage(data.get("usage"))
        body = dispatch.response.body
        if req.response_filters:
            for f in req.response_filters:
                data = await f.apply(data)
            body = orjson.dumps(data)
        if req.wire is not None:
            body = req.wire.json(data)
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            ex.finish_reason = choices[0].get("finish_reason")
        if req.capture_response:
            ex.response_text = response_text(data)
    finally:
        dispatch.release()
    ex.first_token_at = ex.last_token_at = None
    ex.overhead_s = time.perf_counter() - ex.started - ex.upstream_s
    resp = web.Response(
        body=body,
        content_type="application/json",
        headers={
            "x-request-id": ex.request_id,
            "x-fleetgate-deployment": dispatch.deployment.id,
            "x-fleetgate-overhead-ms": f"{ex.overhead_s * 1000:.3f}",
            **req.response_headers,
        },
    )
    _record(gw, ex)
    return resp


def _record(gw: GatewayState, ex: Exchange) -> None:
    record_exchange(ex, gw.metrics, gw.access_log, gw.tracer)
