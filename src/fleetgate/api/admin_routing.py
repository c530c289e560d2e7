"""Admin API of engine-aware routing (master key only).

- ``GET /admin/routing/decisions?alias=&deployment=&reason=&tenant=&since=&limit=``: the newest
  sampled routing decisions, each with its candidates' expected TTFT and its parts (seconds).
- ``GET /admin/routing/engines``: what the router believes about each engine right now.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from fleetgate.api.admin import require_master
from fleetgate.errors import InvalidRequest
from fleetgate.routing.engine_stats import engine_key
from fleetgate.routing.kv_aware import EngineAwareRouting

__all__ = ["routing_decisions", "routing_engines"]


def _json(value: object) -> web.Response:
    return web.Response(body=orjson.dumps(value), content_type="application/json")


def _routing(request: web.Request) -> EngineAwareRouting | None:
    gw, _ = require_master(request)
    observer = gw.dispatcher.observer
    return observer if isinstance(observer, EngineAwareRouting) else None


def _number(request: web.Request, name: str) -> float | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a number", param=name) from None


async def routing_decisions(request: web.Request) -> web.Response:
    """Sampled decisions, newest first."""
    routing = _routing(request)
    if routing is None:
        return _json({"data": [], "hit_ratio": {}})
    limit = _number(request, "limit")
    q = request.query
    found = routing.decisions.query(
        alias=q.get("alias"),
        deployment=q.get("deployment"),
        reason=q.get("reason"),
        tenant=q.get("tenant"),
        since=_number(request, "since"),
        limit=max(1, min(1000, int(limit))) if limit is not None else 100,
    )
    aliases = {d.alias for d in found}
    ratios = {a: routing.decisions.hit_ratio(a) for a in sorted(aliases)}
    return _json({"data": [d.to_dict() for d in found], "hit_ratio": ratios})


async def routing_engines(request: web.Request) -> web.Response:
    """The router's view of every engine of an engine-aware alias."""
    routing = _routing(request)
    gw, _ = require_master(request)
    out = []
    if routing is not None:
        for dep in gw.tables.table.deployments():
            view = routing.stats.view(dep)
            key = engine_key(dep)
            out.append({
                "alias": dep.alias, "deployment": dep.id, "engine_url": key,
                "engine": view.engine, "queued": view.queued, "running": view.running,
                "queued_prefill_tokens": view.queued_prefill_tokens,
                "kv_usage": view.kv_usage, "scraped": view.scraped,
                "index_blocks": routing.index.size(key),
                "index_capacity": routing.index.capacity(key),
            })  # fmt: skip
    return _json({"data": out})
