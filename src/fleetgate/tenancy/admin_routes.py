"""Admin API of tenancy: teams, users, keys, spend reports and audit.

The master key may call every route; a team admin key manages only its own team's keys and
reads only its own team's spend and audit. Every call is recorded in the admin audit log.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, NotFound, PermissionDenied
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.tenancy.reports import audit_log, spend_report
from fleetgate.tenancy.runtime import Tenancy
from fleetgate.tenancy.service import parse_time_ms

__all__ = ["TenancyAdmin"]

_json = json_reply


async def _body(request: web.Request) -> dict[str, Any]:
    return await read_json(request, 1 << 20)


class TenancyAdmin:
    """The routes (built only while tenancy is on: off, the app answers them 503
    ``feature_disabled``, `fleetgate.feature.switched_off_routes`)."""

    def __init__(self, tenancy: Tenancy, access: AdminAccess) -> None:
        self.tenancy = tenancy
        self.access = access

    def _caller(self, request: web.Request) -> tuple[Tenancy, Principal]:
        return self.tenancy, self.access.admin(request)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/admin/teams", store_unavailable_is_503(self.create_team)),
            web.get("/admin/teams", store_unavailable_is_503(self.list_teams)),
            web.get("/admin/teams/{team}", store_unavailable_is_503(self.get_team)),
            web.post("/admin/users", store_unavailable_is_503(self.create_user)),
            web.post("/admin/keys", store_unavailable_is_503(self.create_key)),
            web.get("/admin/keys", store_unavailable_is_503(self.list_keys)),
            web.delete("/admin/keys/{key_id}", store_unavailable_is_503(self.revoke_key)),
            web.get("/admin/spend", store_unavailable_is_503(self.get_spend)),
            web.get("/admin/spend/dead-letters", store_unavailable_is_503(self.get_dead_letters)),
            web.get("/admin/audit", store_unavailable_is_503(self.get_audit)),
        ]

    async def create_team(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        return _json(await tenancy.service.create_team(actor, await _body(request)), 201)

    async def list_teams(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        return _json({"data": await tenancy.service.list_teams(actor)})

    async def get_team(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        return _json(await tenancy.service.get_team(actor, request.match_info["team"]))

    async def create_user(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        return _json(await tenancy.service.create_user(actor, await _body(request)), 201)

    async def create_key(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        return _json(await tenancy.service.create_key(actor, await _body(request)), 201)

    async def list_keys(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        keys = await tenancy.service.list_keys(actor, request.query.get("team"))
        await tenancy.service.record_admin(actor, "key.list", request.query.get("team", "*"), {})
        return _json({"data": keys})

    async def revoke_key(self, request: web.Request) -> web.Response:
        tenancy, actor = self._caller(request)
        return _json(await tenancy.service.revoke_key(actor, request.match_info["key_id"]))

    async def get_spend(self, request: web.Request) -> web.Response:
        """``GET /admin/spend?group_by=team,alias,key,tag&since=&until=&team=``."""
        tenancy, actor = self.tenancy, self.access.spend_reader(request)
        every_team = actor.may("spend_all")  # the master and a finance viewer
        q = request.query
        groups = [g.strip() for g in q.get("group_by", "team").split(",") if g.strip()]
        ref = q.get("team")
        team_id = None
        if ref:  # an id or a name, as on the other routes; someone else's team is 403 either way
            team_id = ref if not every_team and ref == actor.team_id else None
            if team_id is None:
                try:
                    team_id = await tenancy.service.team_id(ref)
                except NotFound:
                    if not every_team:
                        raise PermissionDenied(
                            "This key may only see its own team's spend."
                        ) from None
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

    async def get_audit(self, request: web.Request) -> web.Response:
        """``GET /admin/audit?kind=admin|request&limit=100``."""
        tenancy, actor = self._caller(request)
        try:
            limit = int(request.query.get("limit", "100"))
        except ValueError:
            raise InvalidRequest("'limit' must be an integer", param="limit") from None
        rows = await audit_log(tenancy.db, actor, request.query.get("kind", "admin"), limit)
        return _json({"data": rows})

    async def get_dead_letters(self, request: web.Request) -> web.Response:
        """``GET /admin/spend/dead-letters?limit=100``: spend/audit records the store refused,
        set aside by the record writer (newest first; master key only: every team's rows)."""
        tenancy, actor = self._caller(request)
        if not actor.is_master:
            raise PermissionDenied("Only the master key may read the dead-letter records.")
        raw = request.query.get("limit", "100")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 4 and 1 <= int(raw) <= 1000):
            raise InvalidRequest("'limit' must be an integer from 1 to 1000", param="limit")
        entries, total = await asyncio.to_thread(tenancy.writer.dead_letters.recent, int(raw))
        return _json({"data": entries, "total": total})
