"""Admin API of routing (master key only).

Canary splits:

- ``PUT /admin/aliases/{alias}/split`` ``{"weights": {"v1": 90, "v2": 10}, "sticky": true}``:
  set the alias's traffic percentages per deployment version; every replica follows within a
  second. Rollback is the same call with the old weights.
- ``GET /admin/aliases/{alias}/split``: the split in force here, and the alias's versions.
- ``DELETE /admin/aliases/{alias}/split``: no split (every version, by the alias's strategy).
- ``GET /admin/splits``: every split in force.

Engine-aware routing:

- ``GET /admin/routing/decisions?alias=&deployment=&reason=&tenant=&since=&limit=``: the newest
  sampled routing decisions, each with its candidates' expected TTFT and its parts (seconds).
- ``GET /admin/routing/engines``: what the router believes about each engine right now.
- ``POST /admin/routing/prewarm`` ``{"alias", "messages", "tenant", "replicas"}``: put a shared
  prefix into the KV cache of up to ``replicas`` idle engines of the alias.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from aiohttp import web

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.routing.canary import CanarySplits, Split
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.engine_stats import engine_key
from fleetgate.routing.prewarm import prewarm
from fleetgate.routing.table import RouteTable

__all__ = ["CanaryAdmin", "EngineRoutingAdmin"]

_json = json_reply


def _view(alias: str, versions: list[str], split: Split | None) -> dict[str, object]:
    return {"alias": alias, "versions": versions,
            "split": split.to_dict() if split is not None else None}  # fmt: skip


class CanaryAdmin:
    def __init__(
        self,
        splits: CanarySplits,
        table: Callable[[], RouteTable],
        access: AdminAccess,
        max_body_bytes: int,
    ) -> None:
        self.splits = splits
        self.table = table
        self.access = access
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/aliases/{alias}/split", self.get_split),
            web.put("/admin/aliases/{alias}/split", self.put_split),
            web.delete("/admin/aliases/{alias}/split", self.delete_split),
            web.get("/admin/splits", self.list_splits),
        ]

    def _alias_versions(self, request: web.Request) -> tuple[str, list[str], Principal]:
        actor = self.access.master(request)
        alias = request.match_info["alias"]
        route = self.table().route(alias)  # ModelNotFound (404) for an unknown alias
        return alias, sorted({d.version for d in route.deployments}), actor

    async def get_split(self, request: web.Request) -> web.Response:
        alias, versions, _ = self._alias_versions(request)
        return _json(_view(alias, versions, self.splits.get(alias)))

    async def put_split(self, request: web.Request) -> web.Response:
        alias, versions, actor = self._alias_versions(request)
        body = await read_json(request, self.max_body_bytes)
        split = Split.from_dict(body)
        unknown = sorted(set(split.weights) - set(versions))
        if unknown:
            raise InvalidRequest(
                f"alias '{alias}' has no deployment of version(s) {', '.join(unknown)} "
                f"(it has {', '.join(versions)})",
                param="weights",
            )
        stored = await self.splits.set(alias, split)
        await self.access.record(actor, "canary.split.put", alias, stored.to_dict())
        return _json(_view(alias, versions, stored))

    async def delete_split(self, request: web.Request) -> web.Response:
        alias, versions, actor = self._alias_versions(request)
        await self.splits.clear(alias)
        await self.access.record(actor, "canary.split.delete", alias, {})
        return _json(_view(alias, versions, None))

    async def list_splits(self, request: web.Request) -> web.Response:
        self.access.master(request)
        splits = self.splits.all()
        return _json({"data": [{"alias": a, **s.to_dict()} for a, s in sorted(splits.items())]})


def _number(request: web.Request, name: str) -> float | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):  # "nan", "inf", "1e400"
        raise InvalidRequest(f"'{name}' must be a finite number", param=name)
    return value


class EngineRoutingAdmin:
    """``routing`` is None when the dispatcher has no engine-aware observer (empty answers)."""

    def __init__(
        self,
        routing: EngineAwareRouting | None,
        table: Callable[[], RouteTable],
        access: AdminAccess,
        max_body_bytes: int = 16 << 20,
    ) -> None:
        self.routing = routing
        self.table = table
        self.access = access
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/routing/decisions", self.decisions),
            web.get("/admin/routing/engines", self.engines),
            web.post("/admin/routing/prewarm", self.prewarm),
        ]

    async def decisions(self, request: web.Request) -> web.Response:
        """Sampled decisions, newest first."""
        self.access.master(request)
        routing = self.routing
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

    async def prewarm(self, request: web.Request) -> web.Response:
        """``{"alias", "messages", "tenant", "replicas"}``: put a shared prefix into the KV
        cache of up to ``replicas`` idle engines (see `fleetgate.routing.prewarm`)."""
        actor = self.access.master(request)
        body = await read_json(request, self.max_body_bytes)
        alias = body.get("alias")
        if not isinstance(alias, str):
            raise InvalidRequest("'alias' must name an alias", param="alias")
        route = self.table().route(alias)  # 404 for an unknown alias
        if route.config.strategy not in ("kv-aware", "pd-disagg") or self.routing is None:
            raise InvalidRequest(
                f"alias '{alias}' is not routed by kv-aware or pd-disagg", param="alias"
            )
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)
        ):
            raise InvalidRequest("'messages' must be chat messages with text", param="messages")
        tenant = body.get("tenant")
        if tenant is None and not self.routing.config.tenant_isolation:
            tenant = "public"
        if not isinstance(tenant, str) or not tenant:
            raise InvalidRequest(
                "'tenant' (the team whose cache it is) is required", param="tenant"
            )
        replicas = body.get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 8:
            raise InvalidRequest("'replicas' must be an integer in 1..8", param="replicas")
        results = await prewarm(self.routing, route, messages, tenant=tenant, replicas=replicas)
        await self.access.record(actor, "routing.prewarm", alias, {"tenant": tenant,
                                                                   "results": results})  # fmt: skip
        return _json({"alias": alias, "tenant": tenant, "data": results})

    async def engines(self, request: web.Request) -> web.Response:
        """The router's view of every engine of an engine-aware alias."""
        self.access.master(request)
        routing = self.routing
        out = []
        if routing is not None:
            for dep in self.table().deployments():
                view = routing.stats.view(dep)
                key = engine_key(dep)
                out.append({
                    "alias": dep.alias, "deployment": dep.id, "engine_url": key,
                    "engine": view.engine, "queued": view.queued, "running": view.running,
                    "queued_prefill_tokens": view.queued_prefill_tokens,
                    "kv_usage": view.kv_usage, "scraped": view.scraped,
                    "index_blocks": routing.index.size(key),
                    "index_capacity": routing.index.capacity(key),
                    "kv_events": dep.config.kv_events is not None,
                    "kv_events_trusted": routing.kv_events.trusted(key),
                    "kv_events_blocks": routing.kv_events.size(key),
                })  # fmt: skip
        return _json({"data": out})
