"""Liveness, readiness (which aliases have no healthy deployment) and ``/metrics``."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.telemetry.registry import Registry

__all__ = ["live", "metrics", "ready"]


async def live(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


async def ready(request: web.Request) -> web.Response:
    """200 when every alias has a healthy deployment; 503 naming those that have none."""
    gw = request.app[GATEWAY]
    now = time.monotonic()
    aliases: dict[str, dict[str, int]] = {}
    unavailable = []
    for alias in gw.tables.table.aliases():
        deployments = gw.tables.table.route(alias).deployments
        healthy = sum(1 for d in deployments if d.state.healthy(now))
        aliases[alias] = {"healthy": healthy, "total": len(deployments)}
        if healthy == 0:
            unavailable.append(alias)
    body = {
        "status": "ok" if not unavailable else "degraded",
        "unavailable_aliases": unavailable,
        "aliases": aliases,
    }
    return web.Response(
        body=orjson.dumps(body), status=200 if not unavailable else 503,
        content_type="application/json",
    )  # fmt: skip


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    if gw.worker_metrics is not None:
        body = await gw.worker_metrics.render()
    else:
        body = gw.metrics.registry.render()
    return web.Response(body=body, headers={"Content-Type": Registry.CONTENT_TYPE})
