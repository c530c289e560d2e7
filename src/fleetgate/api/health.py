"""Health: ``/health`` (as vLLM, SGLang and LiteLLM answer it), liveness, readiness, metrics.

- ``GET /health`` and ``GET /health/live``: 200 while the process serves (load testers such as
  GuideLLM probe ``/health`` before they start).
- ``GET /health/ready``: 200 when the aliases that count (``health.ready_aliases``, default
  every alias) have a healthy deployment by ``health.ready_rule`` (``any``: at least one;
  ``all``: each), else 503; the body names the unavailable aliases and healthy/total per alias.
  ``?alias=NAME`` asks about one alias (404 if unknown), so a regional failover can watch the
  models it cares about instead of the whole gateway.
- ``GET /health/region``: for a global load balancer or DNS health check choosing a region:
  200 when ``/health/ready`` is and the region's Redis (``FLEETGATE_REDIS_URL``, if any)
  answers a PING within 1 s, else 503 with the reason (``redis``: ``ok``, ``none`` or the
  error). ``/health/ready`` itself does not ask Redis: within a region the limiters'
  ``fail_open``/``fail_closed`` policy decides what a Redis outage means.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.errors import ModelNotFound
from fleetgate.http import json_reply
from fleetgate.resp import RespError
from fleetgate.telemetry.registry import Registry

__all__ = ["health", "live", "metrics", "ready", "region"]

REDIS_PING_S = 1.0


async def live(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


health = live


def _alias_health(gw: GatewayState, aliases: list[str]) -> dict[str, dict[str, int]]:
    now = time.monotonic()
    out: dict[str, dict[str, int]] = {}
    for alias in aliases:
        deployments = gw.tables.table.route(alias).deployments
        healthy = sum(1 for d in deployments if d.state.healthy(now))
        # out of rotation but held for (scaled to zero, asleep): the alias still serves
        wakeable = sum(1 for d in deployments if d.config.wake and not d.state.healthy(now))
        out[alias] = {"healthy": healthy, "wakeable": wakeable, "total": len(deployments)}
    return out


async def ready(request: web.Request) -> web.Response:
    """Readiness of the gateway, or of one alias (``?alias=``)."""
    ok, body = _readiness(request)
    return json_reply(body, 200 if ok else 503)


async def _redis_state(gw: GatewayState) -> str:
    url = gw.settings.redis_url
    if not url:
        return "none"
    try:
        reply = await asyncio.wait_for(gw.resources.redis.commands(url).call("PING"), REDIS_PING_S)
    except (OSError, TimeoutError, RespError) as exc:
        # the error's class only: the body is public, the Redis address is not
        return f"down: {type(exc).__name__}"
    return "ok" if reply in (b"PONG", "PONG") else "down: unexpected PING reply"


async def region(request: web.Request) -> web.Response:
    """Readiness of this gateway as a member of its region (``/health/ready`` and Redis)."""
    ok, body = _readiness(request)
    redis = await _redis_state(request.app[GATEWAY])
    ok = ok and redis in ("ok", "none")
    return json_reply({**body, "ready": ok, "redis": redis}, 200 if ok else 503)


def _readiness(request: web.Request) -> tuple[bool, dict[str, object]]:
    gw = request.app[GATEWAY]
    cfg = gw.tables.table.config.health
    known = gw.tables.table.aliases()
    one = request.query.get("alias")
    if one is not None:
        if one not in known:
            raise ModelNotFound(f"No alias '{one}'.", param="alias")
        counted, rule = [one], "all"
    else:
        counted = [a for a in cfg.ready_aliases if a in known] or known
        rule = cfg.ready_rule
    aliases = _alias_health(gw, counted)
    unavailable = [a for a, h in aliases.items() if h["healthy"] == 0 and h["wakeable"] == 0]
    if rule == "all":
        ok = not unavailable
    else:
        ok = len(unavailable) < len(aliases) or not aliases
    missing = gw.features.missing() if one is None else []
    ok = ok and not missing
    body: dict[str, object] = {
        "status": "ok" if not unavailable and not missing else "degraded",
        "ready": ok,
        "missing": missing,
        "rule": rule,
        "unavailable_aliases": unavailable,
        "aliases": aliases,
    }
    return ok, body


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    if gw.worker_metrics is not None:
        body = await gw.worker_metrics.render()
    else:
        body = gw.metrics.registry.render()
    return web.Response(body=body, headers={"Content-Type": Registry.CONTENT_TYPE})
