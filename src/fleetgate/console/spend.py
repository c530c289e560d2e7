"""Spend by team, alias, key, tag, deployment or version over a date range: a chart, a table
(paginated on the server) and a CSV download, all from `fleetgate.tenancy.reports.spend_report`
(one grouped query; the store sums, the page never sees a spend row)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from markupsafe import Markup

from fleetgate.console.charts import bar_chart, line_chart
from fleetgate.console.core import Console
from fleetgate.console.forms import FIRST_DAY, page_number, page_of, query_date
from fleetgate.console.names import Names
from fleetgate.console.sessions import Session
from fleetgate.console.spend_series import SERIES_GROUPS, STEPS, Series, spend_series
from fleetgate.csv_export import csv_text
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.tenancy.reports import GROUPS, spend_report
from fleetgate.timespans import DAY_MS

__all__ = ["SpendPages"]

SPEND_ROLES = ("master", "team_admin", "finance_viewer")
DEFAULT_DAYS = 30


def _ms(day: date) -> int:
    """The start of ``day`` (UTC) in ms; day arithmetic in ms never leaves `date`'s range."""
    return (day - FIRST_DAY).days * DAY_MS


class SpendPages:
    def __init__(self, console: Console) -> None:
        self.console = console

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/ui/spend", self.page), web.get("/ui/spend.csv", self.csv)]

    async def _report(
        self, request: web.Request, session: Session
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        q = request.query
        group = q.get("group", "team")
        if group not in GROUPS:
            raise InvalidRequest(f"'group' must be one of {', '.join(GROUPS)}", param="group")
        today = datetime.now(UTC).date()
        until = query_date(q.get("until"), "until", today)
        since = query_date(
            q.get("since"), "since", max(FIRST_DAY, until - timedelta(days=DEFAULT_DAYS - 1))
        )
        if since > until:
            raise InvalidRequest("'since' must not be after 'until'", param="since")
        actor = session.principal
        team_ref = q.get("team", "").strip()
        team_id = None
        if team_ref:
            if actor.is_master or actor.role == "finance_viewer":
                team_id = await self.console.tenancy.service.team_id(team_ref)
            elif team_ref != actor.team_id:
                raise PermissionDenied("This key may only see its own team's spend.")
            else:
                team_id = team_ref
        rows = await spend_report(
            self.console.tenancy.db,
            actor,
            [group],
            _ms(since),
            _ms(until) + DAY_MS,  # through the end of ``until``
            team_id,
        )
        rows.sort(key=lambda r: r["spend_nusd"], reverse=True)
        view = {"group": group, "since": since.isoformat(), "until": until.isoformat(),
                "team": team_ref, "team_id": team_id or ""}  # fmt: skip
        return view, rows

    async def _series(
        self, request: web.Request, session: Session, view: dict[str, Any]
    ) -> tuple[dict[str, str], Series]:
        """The over-time chart's choices (``over``: team or alias, ``step``: day or hour)
        and its series over the page's dates."""
        q = request.query
        over = q.get("over", "team")
        if over not in SERIES_GROUPS:
            raise InvalidRequest(f"'over' must be one of {', '.join(SERIES_GROUPS)}", param="over")
        days = (date.fromisoformat(view["until"]) - date.fromisoformat(view["since"])).days + 1
        step = q.get("step") or ("hour" if days <= 2 else "day")
        if step not in STEPS:
            raise InvalidRequest("'step' must be day or hour", param="step")
        series = await spend_series(
            self.console.tenancy.db, session.principal, over, step,
            _ms(date.fromisoformat(view["since"])),
            _ms(date.fromisoformat(view["until"])) + DAY_MS, view["team_id"] or None,
        )  # fmt: skip
        return {"over": over, "step": step}, series

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, SPEND_ROLES)
        started = time.perf_counter()
        view, rows = await self._report(request, session)
        size = self.console.config.page_size
        page = page_number(request.query.get("page"))
        shown, more = page_of(rows, page, size)
        group = view["group"]
        names = self.console.names()

        def label(r: dict[str, Any]) -> Any:
            return names.group(group, r.get(group), r.get("team_name"))

        chart = bar_chart(
            f"Spend by {group}, {view['since']} to {view['until']} (USD)",
            [(str(label(r).striptags()), float(r["spend_usd"])) for r in rows],
            "$",
        )
        over, series = await self._series(request, session, view)
        over_time = _over_time(names, view, over, series)
        totals = {
            "spend_usd": sum(r["spend_usd"] for r in rows),
            "requests": sum(r["requests"] for r in rows),
        }
        return self.console.page(
            request, session, "spend.html", view=view, rows=shown, groups=GROUPS,
            chart=Markup(chart), totals=totals, page=page, more=more,
            label=label, query=_query(view), took_ms=(time.perf_counter() - started) * 1000,
            over=over, over_time=Markup(over_time), clipped=series.clipped,
        )  # fmt: skip

    async def csv(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, SPEND_ROLES)
        view, rows = await self._report(request, session)
        group = view["group"]
        columns = [group, *(["team_name"] if group == "team" else [])]
        columns += ["spend_usd", "requests", "input_tokens", "output_tokens"]
        text = csv_text(columns, ([r.get(c) for c in columns] for r in rows))
        name = f"spend-by-{group}-{view['since']}-{view['until']}.csv"
        return web.Response(
            text=text,
            content_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )


def _query(view: dict[str, str]) -> str:
    return urlencode({k: v for k, v in view.items() if v and k != "team_id"})


def _over_time(names: Names, view: dict[str, str], over: dict[str, str], series: Series) -> str:
    fmt = "%m-%d" if over["step"] == "day" else "%m-%d %Hh"
    ticks = [datetime.fromtimestamp(s / 1000, UTC).strftime(fmt) for s in series.starts]
    lines = [
        ("other" if v is None else names.team_name(v) if over["over"] == "team" else v, values)
        for v, values in series.lines
    ]
    title = f"Spend per {over['step']} by {over['over']}, {view['since']} to {view['until']} (USD)"
    return line_chart(title, ticks, lines, "$")
