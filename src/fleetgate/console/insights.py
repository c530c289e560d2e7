"""Insights in the console: business metrics (``/ui/insights``), answer quality by alias and
version (``/ui/insights/quality``) and the key hygiene report (``/ui/insights/keys``), all
read through the insights feature's `InsightsReports` (the admin API's own reports, so the
figures are the same). The review queue is `console.insights_reviews`.

Roles as the admin API's: the master key reads every team (or one, by name or id); a team
admin reads its own team only. With the ``insights:`` section absent, each page says so.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from markupsafe import Markup

from fleetgate.console.charts import line_chart
from fleetgate.console.core import ADMINS, Console
from fleetgate.console.forms import query_date
from fleetgate.console.sessions import Session
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.insights.business import RETENTION_DAYS, day_of
from fleetgate.insights.reports import InsightsReports
from fleetgate.insights.routes import MAX_RANGE_DAYS
from fleetgate.timespans import DAY_MS

__all__ = ["InsightsPages", "insights_team"]

DEFAULT_DAYS = 30


def _range(request: web.Request) -> tuple[date, date]:
    until = query_date(request.query.get("until"), "until", datetime.now(UTC).date())
    first = until - timedelta(days=DEFAULT_DAYS - 1)
    since = query_date(request.query.get("since"), "since", first)
    if since > until or (until - since).days >= MAX_RANGE_DAYS:
        raise InvalidRequest(
            f"'since' must not be after 'until', and the range at most {MAX_RANGE_DAYS} days",
            param="since",
        )
    return since, until


async def insights_team(console: Console, session: Session, ref: str) -> str | None:
    """The team a page is cut to: a team admin's own (asking for another is a 403); for the
    master key the team named by ``ref`` (name or id; 404 if none), or None for every team."""
    actor = session.principal
    if actor.is_master:
        return await console.tenancy.service.team_id(ref) if ref else None
    if ref and ref != actor.team_id and ref != console.names().team_name(actor.team_id):
        raise PermissionDenied("A team admin reads only its own team's insights.")
    return actor.team_id or ""


def _share(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


class InsightsPages:
    def __init__(self, console: Console, reports: InsightsReports | None) -> None:
        self.console = console
        self.reports = reports

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/insights", self.business),
            web.get("/ui/insights/quality", self.quality),
            web.get("/ui/insights/keys", self.keys),
        ]

    def _off(self, request: web.Request, session: Session, tab: str) -> web.Response:
        return self.console.page(request, session, "insights_off.html", tab=tab)

    async def _view(self, request: web.Request, session: Session) -> dict[str, Any]:
        since, until = _range(request)
        ref = request.query.get("team", "").strip()
        team_id = await insights_team(self.console, session, ref)
        view = {"since": since.isoformat(), "until": until.isoformat(), "team": ref}
        return {
            **view,
            "team_id": team_id,
            "query": urlencode({k: v for k, v in view.items() if v}),
        }

    async def business(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        if self.reports is None:
            return self._off(request, session, "business")
        started = time.perf_counter()
        view = await self._view(request, session)
        since, until = date.fromisoformat(view["since"]), date.fromisoformat(view["until"])
        report = await self.reports.business(day_of(since), day_of(until), view["team_id"])
        dau = report["dau"]
        chart = line_chart(
            f"Daily active users, {view['since']} to {view['until']}",
            [d["day"][5:] for d in dau],
            [("Daily active users", [float(d["users"]) for d in dau])],
            chart_id="chart-dau",
        )
        plans = sorted(report["plans"].items(), key=lambda kv: -kv[1]["active_users"])
        return self.console.page(
            request, session, "insights_business.html", tab="business", view=view,
            report=report, chart=Markup(chart), plans=plans, share=_share,
            retention_days=RETENTION_DAYS, took_ms=(time.perf_counter() - started) * 1000,
        )  # fmt: skip

    async def quality(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        if self.reports is None:
            return self._off(request, session, "quality")
        started = time.perf_counter()
        view = await self._view(request, session)
        start = day_of(date.fromisoformat(view["since"])) * DAY_MS
        end = (day_of(date.fromisoformat(view["until"])) + 1) * DAY_MS
        rows = await self.reports.quality(start, end, view["team_id"])
        return self.console.page(
            request, session, "insights_quality.html", tab="quality", view=view, rows=rows,
            share=_share, took_ms=(time.perf_counter() - started) * 1000,
            follow_up_s=self.reports.config.follow_up_s,
            threshold=self.reports.config.grounding_threshold,
        )  # fmt: skip

    async def keys(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        if self.reports is None:
            return self._off(request, session, "keys")
        raw = request.query.get("days", "").strip()
        days = self.reports.config.unused_key_days
        if raw:
            if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 3650):
                raise InvalidRequest("'days' must be a whole number from 1 to 3650", param="days")
            days = int(raw)
        ref = request.query.get("team", "").strip()
        team_id = await insights_team(self.console, session, ref)
        rows = await self.reports.keys(days, team_id)
        return self.console.page(
            request, session, "insights_keys.html", tab="keys", rows=rows,
            view={"days": days, "team": ref},
        )  # fmt: skip
