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

from fleetgate.console.charts import bar_chart
from fleetgate.console.core import Console
from fleetgate.console.forms import page_number
from fleetgate.console.sessions import Session
from fleetgate.csv_export import csv_text
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.tenancy.reports import GROUPS, spend_report

__all__ = ["SpendPages"]

SPEND_ROLES = ("master", "team_admin", "finance_viewer")
DEFAULT_DAYS = 30


FIRST_DAY, LAST_DAY = date(1970, 1, 1), date(9999, 12, 31)  # what a report may ask for
_DAY_MS = 86_400_000


def _day(raw: str | None, param: str, default: date) -> date:
    """A date from the query (YYYY-MM-DD, from 1970-01-01 to 9999-12-31), else a 400."""
    if not raw:
        return default
    try:
        day = date.fromisoformat(raw) if len(raw) <= 10 else None
    except ValueError:
        day = None
    if day is None or not FIRST_DAY <= day <= LAST_DAY:
        raise InvalidRequest(
            f"'{param}' must be a date (YYYY-MM-DD) from {FIRST_DAY} to {LAST_DAY}", param=param
        )
    return day


def _ms(day: date) -> int:
    """The start of ``day`` (UTC) in ms; day arithmetic in ms never leaves `date`'s range."""
    return (day - FIRST_DAY).days * _DAY_MS


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
        until = _day(q.get("until"), "until", today)
        since = _day(
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
            _ms(until) + _DAY_MS,  # through the end of ``until``
            team_id,
        )
        rows.sort(key=lambda r: r["spend_nusd"], reverse=True)
        view = {"group": group, "since": since.isoformat(), "until": until.isoformat(),
                "team": team_ref}  # fmt: skip
        return view, rows

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, SPEND_ROLES)
        started = time.perf_counter()
        view, rows = await self._report(request, session)
        size = self.console.config.page_size
        page = page_number(request.query.get("page"))
        shown = rows[(page - 1) * size : page * size]
        group = view["group"]

        def label(r: dict[str, Any]) -> str:
            value = r.get("team_name") or r.get(group)
            return str(value) if value is not None else "(none)"

        chart = bar_chart(
            f"Spend by {group}, {view['since']} to {view['until']} (USD)",
            [(label(r), float(r["spend_usd"])) for r in rows],
            "$",
        )
        totals = {
            "spend_usd": sum(r["spend_usd"] for r in rows),
            "requests": sum(r["requests"] for r in rows),
        }
        return self.console.page(
            request, session, "spend.html", view=view, rows=shown, groups=GROUPS,
            chart=Markup(chart), totals=totals, page=page, more=len(rows) > page * size,
            label=label, query=_query(view), took_ms=(time.perf_counter() - started) * 1000,
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
    return urlencode({k: v for k, v in view.items() if v})
