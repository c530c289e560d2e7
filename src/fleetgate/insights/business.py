"""Business metrics from the insights rollups: exact counts, read from the closed days' rollups
(`insights.day_rollup`) and, for days not closed, from one row per user and day.

Definitions (days are UTC days; a user is an end user within a team):

- **DAU** of a day: users with a request that day. **MAU** as of a day: users with a request in
  the 30 days ending that day. **Stickiness**: the mean DAU over those 30 days / MAU.
- **Cohort**: the users first seen on a day. **Day-N retention** of a cohort: the share of it
  with a request on exactly its day + N; reported for cohorts whose day + N is in the range.
- **Per active user**: requests, tokens and cost in the range / users active in the range; per
  plan the same over the users active on that plan.
- **Revenue** of a plan: its users active in the range x ``revenue_usd_month`` x days / 30.
- **Conversion**: users first seen on an unpaid plan whose first paid day is in the range, over
  the users on an unpaid plan at the range's start or first seen in it (first seen by its end
  and not paid before its start).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.insights.day_rollup import DayFigures, day_figures

__all__ = ["RETENTION_DAYS", "BusinessQuery", "business_report", "day_of", "iso_day"]

RETENTION_DAYS = (1, 7, 30)
_EPOCH = dt.date(1970, 1, 1)


def day_of(date: dt.date) -> int:
    return (date - _EPOCH).days


def iso_day(day: int) -> str:
    return (_EPOCH + dt.timedelta(days=day)).isoformat()


@dataclass(frozen=True)
class BusinessQuery:
    """The range ``[start, end]`` (whole days), and the team to cut by (None: every team)."""

    start: int
    end: int
    team_id: str | None = None


def _team(alias: str, q: BusinessQuery) -> str:
    return f" AND {alias}team_id = :team" if q.team_id is not None else ""


async def _rows(conn: AsyncConnection, sql: str, **params: Any) -> list[Any]:
    stmt = text(sql)
    if "paid" in params:
        stmt = stmt.bindparams(bindparam("paid", expanding=True))
    return list((await conn.execute(stmt, params)).all())


def _retention(figures: DayFigures) -> list[dict[str, Any]]:
    cohorts: dict[int, dict[str, Any]] = {
        d: {"day": iso_day(d), "users": n} for d, n in figures.cohorts.items()
    }
    for n in RETENTION_DAYS:
        got = figures.kept.get(n, {})
        for day, cohort in cohorts.items():
            if day + n <= figures.end:
                cohort[f"d{n}"] = got.get(day, 0)
    return [cohorts[d] for d in sorted(cohorts)]


def _retention_totals(cohorts: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for n in RETENTION_DAYS:
        eligible = [c for c in cohorts if f"d{n}" in c]
        size = sum(c["users"] for c in eligible)
        out[f"d{n}"] = sum(c[f"d{n}"] for c in eligible) / size if size else None
    return out


def _plans(figures: DayFigures) -> dict[str, dict[str, Any]]:
    return {
        p: {"active_users": figures.plan_users.get(p, 0), "requests": r, "input_tokens": i,
            "output_tokens": o, "cost_nusd": c}
        for p, (r, i, o, c) in figures.plan_sums.items()
    }  # fmt: skip


async def _conversion(
    conn: AsyncConnection, q: BusinessQuery, paid: Collection[str]
) -> dict[str, Any]:
    params: dict[str, Any] = {"a": q.start, "b": q.end, "paid": list(paid), "team": q.team_id}
    (counts,) = await _rows(
        conn,
        "SELECT SUM(CASE WHEN u.paid_day BETWEEN :a AND :b THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN u.first_day <= :b AND (u.paid_day IS NULL OR u.paid_day >= :a) "
        "THEN 1 ELSE 0 END) FROM fg_insight_users u WHERE u.first_plan NOT IN :paid"
        + _team("u.", q),
        **params,
    )  # one pass over the users: converted in the range, and those who could have
    n, d = int(counts[0] or 0), int(counts[1] or 0)
    return {"converted": n, "unpaid_users": d, "rate": n / d if d else None}


def _per_user(total: Mapping[str, int], active: int) -> dict[str, float | None]:
    if not active:
        return {k: None for k in ("requests", "tokens", "cost_usd")}
    return {
        "requests": total["requests"] / active,
        "tokens": (total["input_tokens"] + total["output_tokens"]) / active,
        "cost_usd": total["cost_nusd"] / 1e9 / active,
    }


def _money(plans: dict[str, dict[str, Any]], revenue: Mapping[str, float], days: int) -> None:
    for name, plan in plans.items():
        plan["cost_usd"] = plan["cost_nusd"] / 1e9
        plan["per_active_user"] = _per_user(plan, plan["active_users"])
        rate = revenue.get(name)
        plan["revenue_usd"] = None if rate is None else plan["active_users"] * rate * days / 30
        plan["cost_per_revenue"] = (
            plan["cost_usd"] / plan["revenue_usd"] if plan["revenue_usd"] else None
        )


async def business_report(
    conn: AsyncConnection,
    q: BusinessQuery,
    *,
    paid: Collection[str],
    revenue_usd_month: Mapping[str, float],
) -> dict[str, Any]:
    """Every figure of the module docstring for ``q``, as a JSON-ready dict."""
    window = q.end - 29
    figures = await day_figures(conn, q.start, q.end, q.team_id, RETENTION_DAYS)
    dau, mau, active = figures.dau, figures.mau, figures.active
    cohorts = _retention(figures)
    plans = _plans(figures)
    days = q.end - q.start + 1
    _money(plans, revenue_usd_month, days)
    keys = ("requests", "input_tokens", "output_tokens", "cost_nusd")
    total = {k: sum(p[k] for p in plans.values()) for k in keys}
    revenues = [p["revenue_usd"] for p in plans.values() if p["revenue_usd"] is not None]
    revenue = sum(revenues) if revenues else None
    return {
        "start": iso_day(q.start),
        "end": iso_day(q.end),
        "team_id": q.team_id,
        "dau": [{"day": iso_day(d), "users": dau.get(d, 0)} for d in range(q.start, q.end + 1)],
        "mau": mau,
        "stickiness": sum(dau.get(d, 0) for d in range(window, q.end + 1)) / 30 / mau
        if mau
        else None,
        "active_users": active,
        "totals": {**total, "cost_usd": total["cost_nusd"] / 1e9},
        "per_active_user": _per_user(total, active),
        "plans": plans,
        "revenue_usd": revenue,
        "cost_per_revenue": total["cost_nusd"] / 1e9 / revenue if revenue else None,
        "retention": {"cohorts": cohorts, **_retention_totals(cohorts)},
        "conversion": await _conversion(conn, q, paid),
    }
