"""vLLM's sleep mode and a log of the headers each model request arrived with.

Sleep mode, as vLLM serves it with ``VLLM_SERVER_DEV_MODE=1``:

- ``POST /sleep?level=1`` (or 2): the engine frees its GPU memory; level 1 keeps the weights in
  CPU memory, level 2 drops them. Both forget the prefix cache. A sleeping engine serves no
  model request (the simulator answers them 503, as a router must not send it any).
- ``POST /wake_up``: back to serving, after ``SimConfig.wake_up_s`` (reloading weights).
- ``GET /is_sleeping``: ``{"is_sleeping": true|false}``.

``GET /sim/requests``: the trace and request-id headers of the last model requests, oldest
first, so a test can see that a caller's ``traceparent`` reached the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from fleetgate.sim.state import SIM_STATE

__all__ = ["RECORDED_HEADERS", "record_and_gate", "sleep_routes"]

RECORDED_HEADERS = ("traceparent", "tracestate", "x-request-id")
"""The request headers ``GET /sim/requests`` keeps for each model request."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


@web.middleware
async def record_and_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Records a model request's headers; refuses it (503) while the engine sleeps."""
    if request.method == "POST" and request.path.startswith("/v1/"):
        state = request.app[SIM_STATE]
        seen = {h: request.headers[h] for h in RECORDED_HEADERS if h in request.headers}
        state.received_headers.append({"path": request.path, **seen})
        if state.sleeping:
            error = {
                "message": "The engine is sleeping; wake it up with POST /wake_up.",
                "type": "service_unavailable",
                "param": None,
                "code": "engine_sleeping",
            }
            return _json({"error": error}, 503)
    return await handler(request)


async def _sleep(request: web.Request) -> web.Response:
    level = request.query.get("level", "1")
    if level not in ("1", "2"):
        error = {"message": "level must be 1 or 2", "type": "invalid_request_error"}
        return _json({"error": {**error, "param": "level", "code": None}}, 400)
    state = request.app[SIM_STATE]
    state.sleeping = True
    state.sleep_level = int(level)
    state.engine.kv.reset()  # both levels discard the KV cache
    return web.Response(status=200)


async def _wake_up(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    if state.sleeping and state.config.wake_up_s > 0:
        await asyncio.sleep(state.config.wake_up_s)
    state.sleeping = False
    state.sleep_level = 0
    return web.Response(status=200)


async def _is_sleeping(request: web.Request) -> web.Response:
    return _json({"is_sleeping": request.app[SIM_STATE].sleeping})


async def _requests(request: web.Request) -> web.Response:
    return _json(list(request.app[SIM_STATE].received_headers))


def sleep_routes() -> list[web.RouteDef]:
    """The sleep-mode endpoints and ``GET /sim/requests``."""
    return [
        web.post("/sleep", _sleep),
        web.post("/wake_up", _wake_up),
        web.get("/is_sleeping", _is_sleeping),
        web.get("/sim/requests", _requests),
    ]
