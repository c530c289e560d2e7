"""LiteLLM's management reads: ``/key/info``, ``/team/info``, ``/spend/logs``.

They answer in LiteLLM's shapes (`shapes`) under fleetgate's own rules (`fleetgate.http.access`,
the admin API's ``docs/tenancy.md``): any key may read its own ``/key/info``; another key's
needs the master key or a team admin key of that key's team (another team's key is 404, as
``DELETE /admin/keys/{id}`` answers); ``/team/info`` is ``GET /admin/teams/{team}`` (the master
key, or a team admin key for its own team); ``/spend/logs`` is a spend report (the master key
and finance viewers every team, a team admin its own team). Tenancy off: 503.

Example::

    GET /key/info?key=sk-fg-...          -> {"key": "sk-fg-...", "info": {"spend": 0.42, ...}}
    GET /team/info?team_id=ml            -> {"team_id": "team_…", "team_info": {...}, "keys": [...]}
    GET /spend/logs?api_key=<hash or key> -> [{"request_id": ..., "spend": ..., ...}, ...]
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from aiohttp import web

import fleetgate.compat.litellm.lookup as lookup
import fleetgate.compat.litellm.shapes as shapes
from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, NotFound, PermissionDenied, ServiceUnavailable
from fleetgate.http import AdminAccess, json_reply
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.store.rows import now_ms
from fleetgate.tenancy.periods import period_bounds
from fleetgate.tenancy.runtime import Tenancy
from fleetgate.timespans import DAY_MS

__all__ = ["Management"]

MAX_ROWS = 1000  # /spend/logs rows per answer
MAX_DAYS = 366  # /spend/logs?start_date=&end_date= range
TEAM_KEYS = 1000  # keys listed by /team/info


def _day(value: str, param: str) -> int:
    try:
        day = date.fromisoformat(value[:10]) if len(value) >= 10 else None
    except ValueError:
        day = None
    if day is None:
        raise InvalidRequest(f"'{param}' must be a date, YYYY-MM-DD", param=param)
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _limit(raw: str | None) -> int:
    if raw is None:
        return MAX_ROWS
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4 and 1 <= int(raw) <= MAX_ROWS):
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_ROWS}", param="limit")
    return int(raw)


class Management:
    """The three routes over tenancy's store; ``tenancy`` None: tenancy is off (503)."""

    def __init__(self, tenancy: Tenancy | None, access: AdminAccess) -> None:
        self.tenancy = tenancy
        self.access = access

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/key/info", store_unavailable_is_503(self.key_info)),
            web.get("/team/info", store_unavailable_is_503(self.team_info)),
            web.get("/spend/logs", store_unavailable_is_503(self.spend_logs)),
        ]

    def _tenancy(self) -> Tenancy:
        if self.tenancy is None:
            raise ServiceUnavailable("Tenancy is disabled in this gateway's config.")
        return self.tenancy

    async def key_info(self, request: web.Request) -> web.Response:
        """``GET /key/info[?key=]``: the caller's key, or the one ``key`` names."""
        tenancy = self._tenancy()
        actor = self.access.authenticated(request)
        presented = self.access.presented_key(request)
        ref = request.query.get("key") or presented
        now = now_ms()
        if actor.is_master and ref == presented:
            async with tenancy.db.engine.connect() as conn:
                spent = await lookup.key_spend(conn, actor.key_id, None, 0)
            return json_reply({"key": ref, "info": shapes.master_key_info(spent)})
        async with tenancy.db.engine.connect() as conn:
            row = await lookup.key_row(conn, lookup.KeyRef.parse(ref))
            if row is None or not self._may_see_key(actor, row):
                raise NotFound("No such key.", param="key")
            since = period_bounds(row.budget_period, now)[0]
            spent = await lookup.key_spend(conn, row.id, row.team_id, since)
            team = await lookup.team_row(conn, row.team_id)
        info = shapes.key_info(row, spent, None if team is None else team.name, now)
        return json_reply({"key": ref, "info": info})

    @staticmethod
    def _may_see_key(actor: Principal, row: Any) -> bool:
        if actor.is_master or row.id == actor.key_id:
            return True
        if actor.team_id != row.team_id:
            return False  # another team's key: not found, nothing told about it
        if not actor.may("manage"):
            raise PermissionDenied("Another key's info needs a team admin key or the master key.")
        return True

    async def team_info(self, request: web.Request) -> web.Response:
        """``GET /team/info[?team_id=]``: a team (id or name), its spend and its keys."""
        tenancy = self._tenancy()
        actor = self.access.admin(request)
        ref = request.query.get("team_id") or actor.team_id
        if not ref:
            raise InvalidRequest("'team_id' is required with the master key", param="team_id")
        now = now_ms()
        async with tenancy.db.engine.connect() as conn:
            row = await lookup.team_row(conn, ref)
            if row is None or not (actor.is_master or actor.team_id == row.id):
                raise NotFound(f"No team '{ref}'.", param="team_id")
            since = period_bounds(row.budget_period, now)[0]
            spent = await lookup.team_spend(conn, row.id, since)
            keys = []
            for k in await lookup.keys_of_team(conn, row.id, TEAM_KEYS):
                k_since = period_bounds(k.budget_period, now)[0]
                k_spent = await lookup.key_spend(conn, k.id, row.id, k_since)
                keys.append(shapes.key_info(k, k_spent, row.name, now))
        await tenancy.service.record_admin(actor, "team.read", row.id, {"via": "/team/info"})
        return json_reply(shapes.team_info(row, spent, keys, now))

    async def spend_logs(self, request: web.Request) -> web.Response:
        """``GET /spend/logs``: request rows (newest first, ``limit`` at most 1000), filtered by
        ``api_key``, ``user_id``, ``request_id``; with ``start_date`` and ``end_date`` (whole
        UTC days, both included) the spend per day split by model and user instead."""
        tenancy = self._tenancy()
        actor = self.access.spend_reader(request)
        q = request.query
        team = None if actor.may("spend_all") else actor.team_id
        key_id = None
        if q.get("api_key"):
            async with tenancy.db.engine.connect() as conn:
                row = await lookup.key_row(conn, lookup.KeyRef.parse(q["api_key"]))
            master = actor.is_master and q["api_key"] == self.access.presented_key(request)
            key_id = "master" if master else None
            if row is not None and (team is None or row.team_id == team):
                key_id = row.id
            if key_id is None:
                raise NotFound("No such key.", param="api_key")
        start, end = q.get("start_date"), q.get("end_date")
        since = until = None
        if start or end:
            if not (start and end):
                raise InvalidRequest("'start_date' and 'end_date' go together", param="end_date")
            since, until = _day(start, "start_date"), _day(end, "end_date") + DAY_MS
            if not 0 < until - since <= MAX_DAYS * DAY_MS:
                raise InvalidRequest(
                    f"'end_date' must be on or after 'start_date', at most {MAX_DAYS} days on",
                    param="end_date",
                )
        f = lookup.SpendFilter(
            team_id=team, key_id=key_id, user_id=q.get("user_id") or None,
            request_id=q.get("request_id") or None, since_ms=since, until_ms=until,
        )  # fmt: skip
        async with tenancy.db.engine.connect() as conn:
            if since is not None:
                body: list[dict[str, Any]] = shapes.day_report(await lookup.day_rows(conn, f))
            else:
                rows = await lookup.spend_rows(conn, f, _limit(q.get("limit")))
                body = [shapes.spend_log(r) for r in rows]
        await tenancy.service.record_admin(
            actor, "spend.read", "/spend/logs", dict(q), team_id=team
        )
        return json_reply(body)
