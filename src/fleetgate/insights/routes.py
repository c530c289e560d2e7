"""The insights admin API: business metrics and the key hygiene report.

The master key reads every team (or one, ``?team=ID``); a team admin key reads only its own
team (its figures are cut to it whatever it asks). Dates are UTC days ``YYYY-MM-DD``::

    GET /admin/insights/business?start=2026-11-01&end=2026-11-30[&team=ID]
    GET /admin/insights/keys[?days=30][&team=ID]
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable

from aiohttp import web

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.http import AdminAccess, json_reply
from fleetgate.insights.business import BusinessQuery, business_report, day_of
from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.keys import key_report
from fleetgate.store.database import Database
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["InsightsAdmin", "MAX_RANGE_DAYS"]

MAX_RANGE_DAYS = 400


def _day(value: str | None, name: str, default: int) -> int:
    if value is None:
        return default
    try:
        return day_of(dt.date.fromisoformat(value))
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a date YYYY-MM-DD.", param=name) from None


def _team(actor: Principal, asked: str | None) -> str | None:
    if actor.is_master:
        return asked or None
    if asked and asked != actor.team_id:
        raise PermissionDenied("A team admin key reads only its own team's insights.")
    return actor.team_id


class InsightsAdmin:
    def __init__(
        self,
        db: Database,
        access: AdminAccess,
        config: Callable[[], InsightsConfig],
        aliases: Callable[[], Iterable[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._access = access
        self._config = config
        self._aliases = aliases
        self._clock = clock

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/insights/business", store_unavailable_is_503(self.business)),
            web.get("/admin/insights/keys", store_unavailable_is_503(self.keys)),
        ]

    async def business(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        today = int(self._clock() // 86_400)
        end = _day(request.query.get("end"), "end", today)
        start = _day(request.query.get("start"), "start", end - 29)
        if start > end or end - start >= MAX_RANGE_DAYS:
            raise InvalidRequest(
                f"'start' must not be after 'end', and the range at most {MAX_RANGE_DAYS} days.",
                param="start",
            )
        config = self._config()
        query = BusinessQuery(start, end, _team(actor, request.query.get("team")))
        async with self._db.engine.connect() as conn:
            report = await business_report(
                conn, query, paid=config.paid_plans, revenue_usd_month=config.revenue_usd_month
            )
        return json_reply(report)

    async def keys(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        raw = request.query.get("days")
        days = self._config().unused_key_days
        if raw is not None:
            if not raw.isdigit() or not 1 <= int(raw) <= 3650:
                raise InvalidRequest("'days' must be a whole number from 1 to 3650.", param="days")
            days = int(raw)
        async with self._db.engine.connect() as conn:
            rows = await key_report(
                conn,
                now_ms=int(self._clock() * 1000),
                days=days,
                aliases=self._aliases(),
                team_id=_team(actor, request.query.get("team")),
            )
        return json_reply({"object": "list", "days": days, "data": rows})
