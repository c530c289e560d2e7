"""``create_sim_app``: the simulator's aiohttp application and its small endpoints."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from aiohttp import web

from fleetgate.errors import FleetgateError, InvalidRequest
from fleetgate.sim.config import SimConfig
from fleetgate.sim.dcgm import dcgm_metrics
from fleetgate.sim.embeddings import embeddings_response
from fleetgate.sim.faults import update_faults
from fleetgate.sim.generate import chat_completions, completions, read_json
from fleetgate.sim.kv_events import KvEventPublisher
from fleetgate.sim.protocol import check_model
from fleetgate.sim.responses_api import responses
from fleetgate.sim.sleep import record_and_gate, sleep_routes
from fleetgate.sim.state import SIM_STATE, SimState
from fleetgate.sim.timings import timing_routes
from fleetgate.telemetry.registry import Registry

__all__ = ["SIM_KV_EVENTS", "create_sim_app"]

SIM_KV_EVENTS = web.AppKey("fleetgate_sim_kv_events", KvEventPublisher)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except FleetgateError as exc:
        if exc.status < 500:
            request.app[SIM_STATE].stats.rejected += 1
        resp = _json(exc.to_dict(), exc.status)
        resp.headers.update(exc.headers)
        return resp


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _models(request: web.Request) -> web.Response:
    cfg = request.app[SIM_STATE].config
    model = {
        "id": cfg.model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "fleetgate-sim",
        "root": cfg.model,
        "parent": None,
        "max_model_len": cfg.max_model_len,
    }
    return _json({"object": "list", "data": [model]})


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[SIM_STATE].registry.render()
    return web.Response(body=body, headers={"Content-Type": Registry.CONTENT_TYPE})


async def _tokenize(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    body = await read_json(request)
    check_model(body, state.config)
    if isinstance(body.get("messages"), list):
        ids = state.tokenizer.encode_chat(body["messages"]).ids
    elif isinstance(body.get("prompt"), str):
        ids = state.tokenizer.encode(body["prompt"])
    else:
        raise InvalidRequest("give 'prompt' (a string) or 'messages' (a list)", param="prompt")
    return _json(
        {
            "count": len(ids),
            "max_model_len": state.config.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }
    )


async def _embeddings(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    body = await read_json(request)
    if isinstance(body, dict):
        check_model(body, state.config)
    state.stats.received += 1
    answer = embeddings_response(
        body,
        model=state.config.model,
        default_dim=state.config.embedding_dim,
        tokenizer=state.tokenizer,
    )
    state.stats.completed += 1
    return _json(answer)


async def _get_faults(request: web.Request) -> web.Response:
    return _json(request.app[SIM_STATE].stats_dict()["faults"])


async def _set_faults(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    state.faults = update_faults(state.faults, await read_json(request))
    return await _get_faults(request)


async def _stats(request: web.Request) -> web.Response:
    return _json(request.app[SIM_STATE].stats_dict())


async def _reset_prefix_cache(request: web.Request) -> web.Response:
    request.app[SIM_STATE].engine.kv.reset()
    return web.Response(status=200)


def create_sim_app(config: SimConfig) -> web.Application:
    """A fresh simulator app; its engine starts and stops with the app (cleanup context).

    Serve it with ``handler_cancellation=True`` (as ``running_sim`` and the CLI do) so a client
    that disconnects while its request waits or hangs aborts the request at once.
    """
    config.validate()
    app = web.Application(middlewares=[_errors, record_and_gate], client_max_size=256 * 1024 * 1024)

    async def engine_ctx(app: web.Application) -> AsyncIterator[None]:
        state = SimState(config)
        app[SIM_STATE] = state
        publisher = None
        if config.kv_events_endpoint:
            publisher = KvEventPublisher(
                config.kv_events_endpoint,
                config.kv_events_replay_endpoint,
                topic=config.kv_events_topic,
                block_size=config.block_size,
            )
            await publisher.start()
            state.engine.kv.listener = publisher
            app[SIM_KV_EVENTS] = publisher
        await state.engine.start()
        yield
        state.shutdown.set()
        await state.engine.aclose()
        if publisher is not None:
            await publisher.aclose()

    async def on_shutdown(app: web.Application) -> None:
        if SIM_STATE in app:
            app[SIM_STATE].shutdown.set()
            await app[SIM_STATE].engine.aclose()

    app.cleanup_ctx.append(engine_ctx)
    app.on_shutdown.append(on_shutdown)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/embeddings", _embeddings)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/dcgm/metrics", dcgm_metrics)  # a DCGM-exporter-shaped GPU view
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_get("/sim/faults", _get_faults)
    app.router.add_post("/sim/faults", _set_faults)
    app.router.add_get("/sim/stats", _stats)
    app.router.add_post("/reset_prefix_cache", _reset_prefix_cache)
    app.router.add_routes(sleep_routes())
    app.router.add_routes(timing_routes())
    return app
