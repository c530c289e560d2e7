"""Business metrics from the insights rollups: exact counts, read from one row per user and day.

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


async def _dau(conn: AsyncConnection, q: BusinessQuery, start: int) -> dict[int, int]:
    rows = await _rows(
        conn,
        "SELECT day, COUNT(*) FROM (SELECT DISTINCT day, team_id, end_user "
        "FROM fg_insight_user_days WHERE day BETWEEN :a AND :b" + _team("", q) + ") s "
        "GROUP BY day",
        a=start, b=q.end, team=q.team_id,
    )  # fmt: skip
    return {int(d): int(n) for d, n in rows}


async def _distinct_users(conn: AsyncConnection, q: BusinessQuery, start: int) -> int:
    rows = await _rows(
        conn,
        "SELECT COUNT(*) FROM (SELECT DISTINCT team_id, end_user FROM fg_insight_user_days "
        "WHERE day BETWEEN :a AND :b" + _team("", q) + ") s",
        a=start, b=q.end, team=q.team_id,
    )  # fmt: skip
    return int(rows[0][0])


async def _retention(conn: AsyncConnection, q: BusinessQuery) -> list[dict[str, Any]]:
    sizes = await _rows(
        conn,
        "SELECT first_day, COUNT(*) FROM fg_insight_users u WHERE first_day BETWEEN :a AND :b"
        + _team("u.", q) + " GROUP BY first_day",
        a=q.start, b=q.end, team=q.team_id,
    )  # fmt: skip
    cohorts: dict[int, dict[str, Any]] = {
        int(d): {"day": iso_day(int(d)), "users": int(n)} for d, n in sizes
    }
    for n in RETENTION_DAYS:
        kept = await _rows(
            conn,
            "SELECT u.first_day, COUNT(*) FROM fg_insight_users u WHERE u.first_day "
            "BETWEEN :a AND :b" + _team("u.", q) + " AND EXISTS (SELECT 1 FROM "
            "fg_insight_user_days d WHERE d.day = u.first_day + :n AND d.team_id = u.team_id "
            "AND d.end_user = u.end_user) GROUP BY u.first_day",
            a=q.start, b=q.end - n, n=n, team=q.team_id,
        )  # fmt: skip
        got = {int(d): int(c) for d, c in kept}
        for day, cohort in cohorts.items():
            if day + n <= q.end:
                cohort[f"d{n}"] = got.get(day, 0)
    return [cohorts[d] for d in sorted(cohorts)]


def _retention_totals(cohorts: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for n in RETENTION_DAYS:
        eligible = [c for c in cohorts if f"d{n}" in c]
        size = sum(c["users"] for c in eligible)
        out[f"d{n}"] = sum(c[f"d{n}"] for c in eligible) / size if size else None
    return out


async def _plans(conn: AsyncConnection, q: BusinessQuery) -> dict[str, dict[str, Any]]:
    sums = await _rows(
        conn,
        "SELECT plan, SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(cost_nusd) "
        "FROM fg_insight_user_days WHERE day BETWEEN :a AND :b" + _team("", q)
        + " GROUP BY plan",
        a=q.start, b=q.end, team=q.team_id,
    )  # fmt: skip
    users = await _rows(
        conn,
        "SELECT plan, COUNT(*) FROM (SELECT DISTINCT plan, team_id, end_user FROM "
        "fg_insight_user_days WHERE day BETWEEN :a AND :b" + _team("", q) + ") s GROUP BY plan",
        a=q.start, b=q.end, team=q.team_id,
    )  # fmt: skip
    active = {str(p): int(n) for p, n in users}
    return {
        str(p): {"active_users": active.get(str(p), 0), "requests": int(r),
                 "input_tokens": int(i), "output_tokens": int(o), "cost_nusd": int(c)}
        for p, r, i, o, c in sums
    }  # fmt: skip


async def _conversion(
    conn: AsyncConnection, q: BusinessQuery, paid: Collection[str]
) -> dict[str, Any]:
    base = "FROM fg_insight_users u WHERE u.first_plan NOT IN :paid" + _team("u.", q)
    params: dict[str, Any] = {"a": q.start, "b": q.end, "paid": list(paid), "team": q.team_id}
    converted = await _rows(
        conn, f"SELECT COUNT(*) {base} AND u.paid_day BETWEEN :a AND :b", **params
    )
    at_risk = await _rows(
        conn,
        f"SELECT COUNT(*) {base} AND u.first_day <= :b AND (u.paid_day IS NULL "
        "OR u.paid_day >= :a)",
        **params,
    )
    n, d = int(converted[0][0]), int(at_risk[0][0])
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
    dau = await _dau(conn, q, min(q.start, window))
    mau = await _distinct_users(conn, q, window)
    active = await _distinct_users(conn, q, q.start)
    cohorts = await _retention(conn, q)
    plans = await _plans(conn, q)
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
