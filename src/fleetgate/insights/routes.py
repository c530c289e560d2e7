"""The insights admin API: business metrics and the key hygiene report.

The master key reads every team (or one, ``?team=ID``); a team admin key reads only its own
team (its figures are cut to it whatever it asks). Dates are UTC days ``YYYY-MM-DD``::

    GET /admin/insights/business?start=2026-11-01&end=2026-11-30[&team=ID]
    GET /admin/insights/keys[?days=30][&team=ID]
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from fleetgate.errors import InvalidRequest
from fleetgate.http import AdminAccess, json_reply
from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.query import query_day, team_scope
from fleetgate.insights.reports import InsightsReports
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["InsightsAdmin", "MAX_RANGE_DAYS"]

MAX_RANGE_DAYS = 400


class InsightsAdmin:
    def __init__(
        self,
        reports: InsightsReports,
        access: AdminAccess,
        config: Callable[[], InsightsConfig],
    ) -> None:
        self._reports = reports
        self._access = access
        self._config = config
        self._clock = reports.clock

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/insights/business", store_unavailable_is_503(self.business)),
            web.get("/admin/insights/keys", store_unavailable_is_503(self.keys)),
        ]

    async def business(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        today = int(self._clock() // 86_400)
        end = query_day(request.query.get("end"), "end", today)
        start = query_day(request.query.get("start"), "start", end - 29)
        if start > end or end - start >= MAX_RANGE_DAYS:
            raise InvalidRequest(
                f"'start' must not be after 'end', and the range at most {MAX_RANGE_DAYS} days.",
                param="start",
            )
        team = team_scope(actor, request.query.get("team"))
        report = await self._reports.business(start, end, team)
        return json_reply(report)

    async def keys(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        raw = request.query.get("days")
        days = self._config().unused_key_days
        if raw is not None:
            if not raw.isdigit() or not 1 <= int(raw) <= 3650:
                raise InvalidRequest("'days' must be a whole number from 1 to 3650.", param="days")
            days = int(raw)
        rows = await self._reports.keys(days, team_scope(actor, request.query.get("team")))
        return json_reply({"object": "list", "days": days, "data": rows})
