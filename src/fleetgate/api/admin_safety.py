"""Admin API of the guardrails (master key only).

- ``GET /admin/safety/policies``: every policy in force, the alias and team mappings, and
  which of them are admin overrides (the rest come from the config file).
- ``GET|PUT /admin/safety/policies/{name}``: read, create or replace a policy (the body is a
  policy as in the config: ``{"input": [...], "stream": [...], "actions": {...}, ...}``).
- ``PUT|DELETE /admin/safety/aliases/{alias}``, ``PUT|DELETE /admin/safety/teams/{team}``:
  ``{"policy": "name"}`` attaches a policy (a team by id or name); DELETE drops the override.
- ``GET /admin/safety/audit?limit=100&key_id=&flagged=true``: the newest audit verdicts.

Changes apply to this process at once and to the other workers sharing its data directory
within a second; an invalid change is refused (400) and nothing changes.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from fleetgate.api.admin import require_master
from fleetgate.api.admin_tenancy import record_admin_action
from fleetgate.api.body import read_json
from fleetgate.errors import ConfigError, InvalidRequest, NotFound, ServiceUnavailable
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.safety.sinks import AuditLog
from fleetgate.tenancy.principal import Principal

__all__ = ["SAFETY", "SAFETY_AUDIT", "add_safety_routes"]

SAFETY = web.AppKey("fleetgate.safety", SafetyRuntime)
SAFETY_AUDIT = web.AppKey("fleetgate.safety_audit", AuditLog)


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


def _runtime(request: web.Request) -> tuple[SafetyRuntime, Principal]:
    _, actor = require_master(request)
    runtime = request.app.get(SAFETY)
    if runtime is None:
        raise ServiceUnavailable("Safety is not configured in this gateway (no 'safety:').")
    return runtime, actor


async def _policy_ref(request: web.Request) -> str | None:
    body = await read_json(request, 1 << 16)
    policy = body.get("policy")
    if not isinstance(policy, str) or not policy:
        raise InvalidRequest("'policy' must be a policy name", param="policy")
    return policy


async def list_policies(request: web.Request) -> web.Response:
    runtime, _ = _runtime(request)
    cfg = runtime.config
    return _json({
        "default_policy": cfg.default_policy,
        "policies": {n: p.model_dump(mode="json") for n, p in cfg.policies.items()},
        "aliases": cfg.aliases, "teams": cfg.teams, "overrides": runtime.overrides,
    })  # fmt: skip


async def get_policy(request: web.Request) -> web.Response:
    runtime, _ = _runtime(request)
    name = request.match_info["name"]
    policy = runtime.config.policies.get(name)
    if policy is None:
        raise NotFound(f"No safety policy '{name}'.")
    return _json({"name": name, **policy.model_dump(mode="json")})


async def put_policy(request: web.Request) -> web.Response:
    runtime, actor = _runtime(request)
    name = request.match_info["name"]
    body = await read_json(request, 1 << 20)
    try:
        policy = await runtime.put_policy(name, body)
    except ConfigError as exc:
        raise InvalidRequest(exc.message) from None
    await record_admin_action(request, actor, "safety.policy.put", name, body)
    return _json({"name": name, **policy.model_dump(mode="json")})


async def _map(request: web.Request, section: str, value: str | None) -> web.Response:
    runtime, actor = _runtime(request)
    target = request.match_info["target"]
    change = runtime.map_alias if section == "aliases" else runtime.map_team
    try:
        await change(target, value)
    except ConfigError as exc:
        raise InvalidRequest(exc.message, param="policy") from None
    await record_admin_action(request, actor, f"safety.{section}.put", target, {"policy": value})
    current = getattr(runtime.config, section).get(target)
    return _json({section[:-1]: target, "policy": current})


async def put_alias(request: web.Request) -> web.Response:
    return await _map(request, "aliases", await _policy_ref(request))


async def delete_alias(request: web.Request) -> web.Response:
    return await _map(request, "aliases", None)


async def put_team(request: web.Request) -> web.Response:
    return await _map(request, "teams", await _policy_ref(request))


async def delete_team(request: web.Request) -> web.Response:
    return await _map(request, "teams", None)


async def get_audit(request: web.Request) -> web.Response:
    """The newest safety audit verdicts (categories, per-check verdicts, failures)."""
    _runtime(request)
    q = request.query
    try:
        limit = max(1, min(int(q.get("limit", "100")), 1000))
    except ValueError:
        raise InvalidRequest("'limit' must be an integer", param="limit") from None
    flagged = {"true": True, "false": False}.get(q.get("flagged", "").lower())
    rows = await request.app[SAFETY_AUDIT].recent(
        limit=limit, key_id=q.get("key_id") or None, flagged=flagged
    )
    return _json({"data": rows})


def add_safety_routes(app: web.Application) -> None:
    app.router.add_get("/admin/safety/policies", list_policies)
    app.router.add_get("/admin/safety/policies/{name}", get_policy)
    app.router.add_put("/admin/safety/policies/{name}", put_policy)
    app.router.add_put("/admin/safety/aliases/{target}", put_alias)
    app.router.add_delete("/admin/safety/aliases/{target}", delete_alias)
    app.router.add_put("/admin/safety/teams/{target}", put_team)
    app.router.add_delete("/admin/safety/teams/{target}", delete_team)
    app.router.add_get("/admin/safety/audit", get_audit)
