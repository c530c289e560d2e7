"""KV prewarm: put a shared prefix (a document set's) into the cache of chosen replicas ahead
of the requests that will use it.

`prewarm` picks up to ``replicas`` engines of a kv-aware (or pd-disagg) alias with the kv-aware
cost (so replicas that already hold the prefix, or the least loaded, come first), skips engines
that are busy (requests queued, or KV use above ``kv_aware.kv_high_water``), and sends each one
``max_tokens: 1`` request of the prefix, one at a time, under the tenant's ``cache_salt`` and
index namespace, so that the tenant's next request with that prefix is routed there and finds
it cached. A deployment with ``priority: true`` gets it at the lowest priority. For a
``pd-disagg`` alias only its prefill pool is warmed (the decode engines receive the KV).

Example::

    results = await prewarm(routing, table.route("chat"), messages, tenant="team-a", replicas=2)
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.routing.context import RouteContext
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.kv_aware import KvAwareStrategy
from fleetgate.routing.table import AliasRoute
from fleetgate.tokens import estimate_prompt_tokens

__all__ = ["prewarm"]

MAX_REPLICAS = 8
_LOWEST_PRIORITY = 1 << 20


def _busy(routing: EngineAwareRouting, dep: Any) -> str | None:
    view = routing.stats.view(dep)
    if view.queued > 0:
        return "busy: requests queued"
    if view.kv_usage > routing.config.kv_aware.kv_high_water:
        return "busy: KV cache nearly full"
    return None


async def prewarm(
    routing: EngineAwareRouting,
    route: AliasRoute,
    messages: list[dict[str, Any]],
    *,
    tenant: str,
    replicas: int = 1,
) -> list[dict[str, Any]]:
    """Warm up to ``replicas`` engines of ``route`` with ``messages``; one result per engine."""
    body: dict[str, Any] = {"model": route.name, "messages": messages, "max_tokens": 1}
    principal = Principal(f"prewarm:{tenant}", team_id=tenant)
    now = time.monotonic()
    free, results = [], []
    pool = route.deployments
    if route.config.strategy == "pd-disagg":
        pool = [d for d in pool if "prefill" in d.config.tags] or pool
    for dep in pool:
        reason = "cooling down" if not dep.state.healthy(now) else _busy(routing, dep)
        if reason is None:
            free.append(dep)
        else:
            results.append({"deployment": dep.id, "warmed": False, "reason": reason})
    strategy = KvAwareStrategy(routing, route.name)
    for _ in range(min(replicas, MAX_REPLICAS)):
        if not free:
            break
        ctx = RouteContext(
            GatewayRequest(
                request_id=f"prewarm-{time.monotonic_ns()}", endpoint=Endpoint.CHAT,
                principal=principal, body=body, alias=route.name, stream=False,
                want_usage=False, prompt_tokens=estimate_prompt_tokens(body), max_tokens=1,
                headers={},
            )
        )  # fmt: skip
        await strategy.prepare(free, ctx)
        pick = routing.tenant_salt.apply(strategy.pick(free, ctx), ctx)
        dep = pick.deployment
        free.remove(dep)
        results.append(await _send(routing, dep, {**body, **(pick.extra_body or {})}))
    return results


async def _send(routing: EngineAwareRouting, dep: Any, body: dict[str, Any]) -> dict[str, Any]:
    cfg = dep.config
    body = {**body, "model": cfg.model}
    if cfg.priority:
        body["priority"] = _LOWEST_PRIORITY
    headers = dict(cfg.extra_headers)
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    started = time.perf_counter()
    try:
        async with routing.http.session().post(
            f"{cfg.api_base}/chat/completions",
            json=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=120.0),
        ) as resp:
            await resp.read()
            ok = resp.status == 200
            reason = None if ok else f"engine answered {resp.status}"
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        ok, reason = False, f"engine unreachable: {type(exc).__name__}"
    out: dict[str, Any] = {"deployment": dep.id, "warmed": ok}
    if ok:
        out["seconds"] = round(time.perf_counter() - started, 4)
    else:
        out["reason"] = reason
    return out
