"""The business figures of a UTC day, closed once and shared (`insights.marks`, kind ``b``).

A day's rollup is its active users counted by plan ('': any plan) and by the day each was last
active before it on that plan (``fg_insight_day_users``; -1: never), with their requests,
tokens and cost, and its active users by the day each was first seen
(``fg_insight_day_cohorts``). Both are sums, so any range adds its days up exactly:

- DAU of a day: its users on plan ''.
- Distinct users over ``[a, b]``: the users of the days in it whose previous day is before
  ``a`` (each user counts once, on its first active day in the range); per plan the same.
- A cohort's size: the users of its day first seen that day; its day-N retention: the users
  of its day + N first seen on its day.

A day depends on the writes to it and to every day before it (previous and first days), so
its span in the marks is every day up to it. The days not closed (today; one written to since)
are computed from ``fg_insight_user_days`` by the same query.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.insights.marks import DAY, Marks, read_marks, runs, store_closed
from fleetgate.insights.tables import day_cohorts, day_users
from fleetgate.store.database import Database

__all__ = ["DayFigures", "close_day", "close_days", "compute_days", "day_figures", "open_days"]

# Each user-day-plan row of the days [a, b] with the user's previous active day (any plan; on
# this plan) and first day: one index seek each (ix_fg_insight_user_days_user).
_LIVE_SQL = """
SELECT d.day, d.team_id, d.end_user, d.plan, d.requests, d.input_tokens, d.output_tokens,
  d.cost_nusd,
  (SELECT MAX(x.day) FROM fg_insight_user_days x WHERE x.team_id = d.team_id
     AND x.end_user = d.end_user AND x.day < d.day),
  (SELECT MAX(x.day) FROM fg_insight_user_days x WHERE x.team_id = d.team_id
     AND x.end_user = d.end_user AND x.plan = d.plan AND x.day < d.day),
  u.first_day
FROM fg_insight_user_days d
JOIN fg_insight_users u ON u.team_id = d.team_id AND u.end_user = d.end_user
WHERE d.day BETWEEN :a AND :b{team}
"""

# The newest day written to (today, mostly), without a search: its users are those whose last
# day it is (``fg_insight_user_lasts``, per plan and any plan), with their previous and first
# days there; its sums are those of its user-day rows. Exact only while no user has a later
# last day (written since the marks were read: midnight), which `_LATER_SQL` checks.
_NEWEST_USERS_SQL = """
SELECT plan, CASE WHEN prev_day < :s THEN 1 ELSE 0 END, CASE WHEN prev_day < :w THEN 1 ELSE 0 END,
  COUNT(*)
FROM fg_insight_user_lasts WHERE last_day = :d{team}
GROUP BY plan, CASE WHEN prev_day < :s THEN 1 ELSE 0 END, CASE WHEN prev_day < :w THEN 1 ELSE 0 END
"""

_NEWEST_SUMS_SQL = """
SELECT plan, SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(cost_nusd)
FROM fg_insight_user_days WHERE day = :d{team} GROUP BY plan
"""

_NEWEST_COHORTS_SQL = """
SELECT first_day, COUNT(*) FROM fg_insight_user_lasts
WHERE last_day = :d AND plan = '' AND :d - first_day IN ({ns}){team}
GROUP BY first_day
"""

_LATER_SQL = "SELECT COUNT(*) FROM fg_insight_user_lasts WHERE last_day > :d"

_USERS_SQL = """
SELECT day, plan, CASE WHEN prev_day < :s THEN 1 ELSE 0 END,
  CASE WHEN prev_day < :w THEN 1 ELSE 0 END, SUM(users), SUM(requests), SUM(input_tokens),
  SUM(output_tokens), SUM(cost_nusd)
FROM fg_insight_day_users WHERE ({days}){team}
GROUP BY day, plan, CASE WHEN prev_day < :s THEN 1 ELSE 0 END,
  CASE WHEN prev_day < :w THEN 1 ELSE 0 END
"""

_COHORTS_SQL = """
SELECT day, first_day, SUM(users) FROM fg_insight_day_cohorts
WHERE ({days}) AND day - first_day IN ({ns}){team}
GROUP BY day, first_day
"""

UserKey = tuple[int, str, str, int]  # (day, team, plan ('' any), previous day (-1 none))
Sums = list[int]  # users, requests, input tokens, output tokens, cost


def _fold(rows: Iterable[Any]) -> tuple[dict[UserKey, Sums], dict[tuple[int, str, int], int]]:
    """A day's rollup rows from its user-day-plan rows (`_LIVE_SQL`)."""
    users: dict[UserKey, Sums] = {}
    anyplan: dict[tuple[int, str, str], list[int]] = {}
    for day, team, user, plan, req, inp, out, cost, prev_any, prev_plan, first in rows:
        key = (int(day), str(team), str(plan), -1 if prev_plan is None else int(prev_plan))
        sums = users.setdefault(key, [0, 0, 0, 0, 0])
        for i, v in enumerate((1, req, inp, out, cost)):
            sums[i] += int(v)
        held = anyplan.get((int(day), str(team), str(user)))
        if held is None:
            prev = -1 if prev_any is None else int(prev_any)
            anyplan[(int(day), str(team), str(user))] = [prev, int(first), 0, 0, 0, 0]
            held = anyplan[(int(day), str(team), str(user))]
        for i, v in enumerate((req, inp, out, cost)):
            held[2 + i] += int(v)
    cohorts: dict[tuple[int, str, int], int] = {}
    for (day, team, _), (prev, first, *totals) in anyplan.items():
        sums = users.setdefault((day, team, "", prev), [0, 0, 0, 0, 0])
        sums[0] += 1
        for i, v in enumerate(totals):
            sums[1 + i] += v
        cohorts[(day, team, first)] = cohorts.get((day, team, first), 0) + 1
    return users, cohorts


async def compute_days(
    conn: AsyncConnection, first: int, last: int, team_id: str | None = None
) -> tuple[dict[UserKey, Sums], dict[tuple[int, str, int], int]]:
    """The rollup of the days ``[first, last]`` computed now from the user-day rows."""
    sql = _LIVE_SQL.format(team=" AND d.team_id = :team" if team_id is not None else "")
    rows = await conn.execute(text(sql), {"a": first, "b": last, "team": team_id})
    return _fold(rows)


async def _add_newest(
    conn: AsyncConnection, figures: DayFigures, day: int, team_id: str | None
) -> bool:
    """Add the newest day ``day`` from the users' last days; False (nothing added) if a user
    has a later one."""
    if await conn.scalar(text(_LATER_SQL), {"d": day}):
        return False
    team = " AND team_id = :team" if team_id is not None else ""
    params = {"d": day, "s": figures.start, "w": figures.window, "team": team_id}
    for plan, lt_s, lt_w, n in await conn.execute(
        text(_NEWEST_USERS_SQL.format(team=team)), params
    ):
        figures.add_users(day, str(plan), bool(lt_s), bool(lt_w), (int(n), 0, 0, 0, 0))
    for plan, *sums in await conn.execute(text(_NEWEST_SUMS_SQL.format(team=team)), params):
        figures.add_users(day, str(plan), False, False, (0, *(int(v or 0) for v in sums)))
    ns = ", ".join(str(n) for n in (0, *figures.retention))
    for first_day, n in await conn.execute(
        text(_NEWEST_COHORTS_SQL.format(ns=ns, team=team)), params
    ):
        figures.add_cohort(day, int(first_day), int(n))
    return True


async def close_day(db: Database, day: int) -> bool:
    """Compute ``day``'s rollup and store it, unless a current one is stored; True if stored."""
    async with db.engine.connect() as conn:
        marks = await read_marks(conn, DAY, None, day)
        if marks.current(day, (-(1 << 30), day)):
            return False
        closed = marks.total(-(1 << 30), day)
        users, cohorts = await compute_days(conn, day, day)
    rows = {
        day_users.name: [
            {"day": d, "team_id": t, "plan": p, "prev_day": prev, "users": s[0],
             "requests": s[1], "input_tokens": s[2], "output_tokens": s[3], "cost_nusd": s[4]}
            for (d, t, p, prev), s in users.items()
        ],
        day_cohorts.name: [
            {"day": d, "team_id": t, "first_day": f, "users": n}
            for (d, t, f), n in cohorts.items()
        ],
    }  # fmt: skip
    tables = ((day_users, "day"), (day_cohorts, "day"))
    return await store_closed(db.engine, db.dialect, DAY, day, closed, 0, tables, rows)


async def close_days(db: Database, last: int, days: int = 400, budget_s: float = 20.0) -> int:
    """Store the rollups of the days ``[last - days + 1, last]`` written to and not current,
    newest first, until ``budget_s`` is spent; how many were stored."""
    async with db.engine.connect() as conn:
        marks = await read_marks(conn, DAY, None, last)
    started = time.monotonic()
    stored = 0
    for day in reversed(open_days(marks, last - days + 1, last)):
        if time.monotonic() - started >= budget_s:
            break
        stored += await close_day(db, day)
    return stored


def open_days(marks: Marks, first: int, last: int) -> list[int]:
    """The days of ``[first, last]`` with writes whose stored rollup is not current."""
    span_total = 0
    out = []
    for unit in sorted(marks.writes):
        span_total += marks.writes[unit]
        if unit > last:
            break
        if unit >= first and marks.closed.get(unit) != (span_total, 0):
            out.append(unit)
    return out


@dataclass
class DayFigures:
    """The sums a business report needs for the days ``[start, end]`` (and the 30 days to
    ``end``, for MAU), added up from closed and computed days alike."""

    start: int
    end: int
    retention: tuple[int, ...]
    dau: dict[int, int] = field(default_factory=dict)
    mau: int = 0
    active: int = 0
    plan_users: dict[str, int] = field(default_factory=dict)
    plan_sums: dict[str, list[int]] = field(default_factory=dict)
    cohorts: dict[int, int] = field(default_factory=dict)
    kept: dict[int, dict[int, int]] = field(default_factory=dict)

    @property
    def window(self) -> int:
        return self.end - 29

    def add_users(self, day: int, plan: str, before_start: bool, before_window: bool,
                  sums: Iterable[int]) -> None:  # fmt: skip
        users, *totals = (int(v) for v in sums)
        if plan == "":
            self.dau[day] = self.dau.get(day, 0) + users
            if before_window and day >= self.window:
                self.mau += users
            if before_start and day >= self.start:
                self.active += users
            return
        if day < self.start:
            return
        if before_start:
            self.plan_users[plan] = self.plan_users.get(plan, 0) + users
        held = self.plan_sums.setdefault(plan, [0, 0, 0, 0])
        for i, v in enumerate(totals):
            held[i] += v

    def add_cohort(self, day: int, first_day: int, users: int) -> None:
        n = day - first_day
        if not self.start <= first_day <= self.end or day > self.end:
            return
        if n == 0:
            self.cohorts[first_day] = self.cohorts.get(first_day, 0) + users
        elif n in self.retention:
            kept = self.kept.setdefault(n, {})
            kept[first_day] = kept.get(first_day, 0) + users


def _days_clause(spans: list[tuple[int, int]], params: dict[str, Any]) -> str:
    parts = []
    for i, (a, b) in enumerate(spans):
        params[f"a{i}"], params[f"b{i}"] = a, b
        parts.append(f"day BETWEEN :a{i} AND :b{i}")
    return " OR ".join(parts)


def _closed_spans(marks: Marks, first: int, last: int, live: list[int]) -> Iterator[int]:
    skip = set(live)
    for unit in marks.closed:
        if first <= unit <= last and unit not in skip:
            yield unit


async def day_figures(
    conn: AsyncConnection, start: int, end: int, team_id: str | None, retention: tuple[int, ...]
) -> DayFigures:
    """The sums of `DayFigures` for ``[start, end]``: closed days from their rollups, the
    others computed now."""
    figures = DayFigures(start, end, retention)
    first = min(start, end - 29)
    marks = await read_marks(conn, DAY, None, end)
    live = open_days(marks, first, end)
    closed = runs(_closed_spans(marks, first, end, live))
    team = " AND team_id = :team" if team_id is not None else ""
    if closed:
        params: dict[str, Any] = {"s": start, "w": end - 29, "team": team_id}
        days = _days_clause(closed, params)
        for day, plan, lt_s, lt_w, *sums in await conn.execute(
            text(_USERS_SQL.format(days=days, team=team)), params
        ):
            figures.add_users(int(day), str(plan), bool(lt_s), bool(lt_w), sums)
        ns = ", ".join(str(n) for n in (0, *retention))
        for day, first_day, n in await conn.execute(
            text(_COHORTS_SQL.format(days=days, ns=ns, team=team)), params
        ):
            figures.add_cohort(int(day), int(first_day), int(n))
    newest = max(marks.writes, default=None)
    for a, b in runs(live):
        if b == newest and await _add_newest(conn, figures, b, team_id):
            b -= 1  # the newest day is added: compute the rest of the run
        if a <= b:
            _add(figures, *await compute_days(conn, a, b, team_id))
    return figures


def _add(
    figures: DayFigures,
    users: dict[UserKey, Sums],
    cohorts: dict[tuple[int, str, int], int],
) -> None:
    for (day, _, plan, prev), sums in users.items():
        figures.add_users(day, plan, prev < figures.start, prev < figures.window, sums)
    for (day, _, first_day), n in cohorts.items():
        figures.add_cohort(day, first_day, n)
