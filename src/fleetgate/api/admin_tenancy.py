"""Admin API of tenancy: teams, users, keys, spend reports and audit.

The master key may call every route; a team admin key manages only its own team's keys and
reads only its own team's spend and audit. Every call is recorded in the admin audit log.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from fleetgate.api.body import read_json
from fleetgate.api.state import GATEWAY
from fleetgate.errors import InvalidRequest, NotFound, PermissionDenied, ServiceUnavailable
from fleetgate.tenancy.auth import bearer_token
from fleetgate.tenancy.principal import Principal
from fleetgate.tenancy.reports import audit_log, spend_report
from fleetgate.tenancy.runtime import Tenancy
from fleetgate.tenancy.service import parse_time_ms

__all__ = ["TENANCY", "add_tenancy_routes"]

TENANCY = web.AppKey("fleetgate.tenancy", Tenancy)


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


def _caller(request: web.Request) -> tuple[Tenancy, Principal]:
    tenancy = request.app.get(TENANCY)
    if tenancy is None:
        raise ServiceUnavailable("Tenancy is disabled in this gateway's config.")
    gw = request.app[GATEWAY]
    principal = gw.auth.authenticate(bearer_token(request.headers.get("Authorization")))
    if not principal.is_master and principal.role != "team_admin":
        raise PermissionDenied("Admin routes need the master key or a team admin key.")
    return tenancy, principal


async def _body(request: web.Request) -> dict[str, Any]:
    return await read_json(request, 1 << 20)


async def create_team(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    return _json(await tenancy.service.create_team(actor, await _body(request)), 201)


async def list_teams(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    return _json({"data": await tenancy.service.list_teams(actor)})


async def get_team(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    return _json(await tenancy.service.get_team(actor, request.match_info["team"]))


async def create_user(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    return _json(await tenancy.service.create_user(actor, await _body(request)), 201)


async def create_key(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    return _json(await tenancy.service.create_key(actor, await _body(request)), 201)


async def list_keys(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    keys = await tenancy.service.list_keys(actor, request.query.get("team"))
    await tenancy.service.record_admin(actor, "key.list", request.query.get("team", "*"), {})
    return _json({"data": keys})


async def revoke_key(request: web.Request) -> web.Response:
    tenancy, actor = _caller(request)
    return _json(await tenancy.service.revoke_key(actor, request.match_info["key_id"]))


async def get_spend(request: web.Request) -> web.Response:
    """``GET /admin/spend?group_by=team,alias,key,tag&since=&until=&team=``."""
    tenancy, actor = _caller(request)
    q = request.query
    groups = [g.strip() for g in q.get("group_by", "team").split(",") if g.strip()]
    ref = q.get("team")
    team_id = None
    if ref:  # an id or a name, as on the other routes; someone else's team is 403 either way
        team_id = ref if not actor.is_master and ref == actor.team_id else None
        if team_id is None:
            try:
                team_id = await tenancy.service.team_id(ref)
            except NotFound:
                if not actor.is_master:
                    raise PermissionDenied("This key may only see its own team's spend.") from None
                raise
    rows = await spend_report(
        tenancy.db,
        actor,
        groups,
        parse_time_ms(q.get("since"), "since"),
        parse_time_ms(q.get("until"), "until"),
        team_id,
    )
    await tenancy.service.record_admin(
        actor, "spend.read", ",".join(groups), dict(q), team_id=team_id
    )
    return _json({"group_by": groups, "data": rows})


async def get_audit(request: web.Request) -> web.Response:
    """``GET /admin/audit?kind=admin|request&limit=100``."""
    tenancy, actor = _caller(request)
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        raise InvalidRequest("'limit' must be an integer", param="limit") from None
    rows = await audit_log(tenancy.db, actor, request.query.get("kind", "admin"), limit)
    return _json({"data": rows})


def add_tenancy_routes(app: web.Application) -> None:
    app.router.add_post("/admin/teams", create_team)
    app.router.add_get("/admin/teams", list_teams)
    app.router.add_get("/admin/teams/{team}", get_team)
    app.router.add_post("/admin/users", create_user)
    app.router.add_post("/admin/keys", create_key)
    app.router.add_get("/admin/keys", list_keys)
    app.router.add_delete("/admin/keys/{key_id}", revoke_key)
    app.router.add_get("/admin/spend", get_spend)
    app.router.add_get("/admin/audit", get_audit)


async def record_admin_action(
    request: web.Request, actor: Principal, action: str, target: str, detail: Any
) -> None:
    """Record an admin action of another area (config, safety) when tenancy is on."""
    tenancy = request.app.get(TENANCY)
    if tenancy is not None:
        await tenancy.service.record_admin(actor, action, target, detail)
