"""The quality figures of a UTC hour, closed once and shared (`insights.marks`, kind ``q``).

An hour's figures (`insights.quality`: requests, streamed, abandoned, regenerated, and the side
figures: feedback, adoption, groundedness, reviews) per team, alias and version are stored in
``fg_insight_quality_hours`` once the hour and its follow-up window are over, so a report
reads its closed hours' sums and computes only the others (the last hour or two of today; an
hour written to since it was closed) from the requests.

An hour's figures depend on its day's requests up to its end (a regeneration repeats the
previous request of its thread that day), the requests of the follow-up window after it (they
save a cut stream from being abandoned) and its side rows (feedback and adoption by the
answer's time; groundedness samples and reviews by their own), so its span in the marks is its
day's hours up to the hour the follow-up window ends in; and it is current only for the
follow-up window it was computed with (the mark's ``param``).

Computing a run of hours reads its requests and the follow-up window after it once (window
functions per thread); the thread's request before the run (same day), where the run does not
start at midnight, is one index seek per thread (``ix_fg_insight_requests_thread``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.insights.marks import HOUR, Marks, read_marks, runs, store_closed
from fleetgate.insights.quality import PATHS, SIDES, Key, combine
from fleetgate.insights.tables import quality_hours
from fleetgate.store.database import Database
from fleetgate.timespans import HOUR_MS

__all__ = [
    "DAY_HOURS",
    "close_hours",
    "compute_hours",
    "hour_report",
    "span",
    "split_current",
]

DAY_HOURS = 24

_LOOKUP = """(SELECT p.prompt_hash FROM fg_insight_requests p
  WHERE p.team_id = w.team_id AND p.thread = w.thread
    AND p.created_ms >= :day0 AND p.created_ms < :a
  ORDER BY p.created_ms DESC, p.request_id DESC LIMIT 1)"""

_PATHS_SQL = """
SELECT CAST(created_ms / 3600000 AS INTEGER), team_id, alias, COALESCE(version, ''), COUNT(*),
  SUM(stream),
  SUM(CASE WHEN stream = 1 AND status = 499 AND (thread IS NULL OR next_ms IS NULL
      OR next_ms - created_ms > :gap) THEN 1 ELSE 0 END),
  SUM(CASE WHEN thread IS NOT NULL AND prompt_hash IS NOT NULL AND prompt_hash = (
      CASE WHEN prev_day = day THEN prev_hash
           WHEN prev_day IS NULL AND day = :day THEN {lookup} END) THEN 1 ELSE 0 END)
FROM (
  SELECT day, team_id, alias, version, stream, status, created_ms, prompt_hash, thread,
    LAG(prompt_hash) OVER t AS prev_hash, LAG(day) OVER t AS prev_day,
    LEAD(created_ms) OVER t AS next_ms
  FROM (SELECT day, team_id, alias, version, stream, status, created_ms, prompt_hash,
               request_id, thread
        FROM fg_insight_requests
        WHERE created_ms >= :a AND created_ms < :ahead{team}) s
  WINDOW t AS (PARTITION BY team_id, thread ORDER BY created_ms, request_id)
) w
WHERE created_ms < :b
GROUP BY CAST(created_ms / 3600000 AS INTEGER), team_id, alias, COALESCE(version, '')
"""

_EVENTS_SQL = """
SELECT CAST(r.created_ms / 3600000 AS INTEGER), e.team_id, e.alias, COALESCE(e.version, ''),
  e.value, COUNT(*)
FROM fg_insight_events e JOIN fg_insight_requests r ON r.request_id = e.request_id
WHERE r.created_ms >= :a AND r.created_ms < :b{team}
GROUP BY CAST(r.created_ms / 3600000 AS INTEGER), e.team_id, e.alias, COALESCE(e.version, ''),
  e.value
"""

_GROUNDING_SQL = """
SELECT CAST(created_ms / 3600000 AS INTEGER), team_id, alias, COALESCE(version, ''), COUNT(*),
  SUM(grounded)
FROM fg_insight_grounding WHERE created_ms >= :a AND created_ms < :b{team}
GROUP BY CAST(created_ms / 3600000 AS INTEGER), team_id, alias, COALESCE(version, '')
"""

_REVIEWS_SQL = """
SELECT CAST(created_ms / 3600000 AS INTEGER), team_id, alias, COALESCE(version, ''), COUNT(*),
  SUM(score)
FROM fg_insight_reviews WHERE created_ms >= :a AND created_ms < :b AND score IS NOT NULL{team}
GROUP BY CAST(created_ms / 3600000 AS INTEGER), team_id, alias, COALESCE(version, '')
"""

_CLOSED_SQL = (
    "SELECT team_id, alias, version, "
    + ", ".join(f"SUM({n})" for n in (*PATHS, *SIDES))
    + " FROM fg_insight_quality_hours WHERE ({hours}){team} GROUP BY team_id, alias, version"
)

Figures = dict[str, float]  # PATHS and SIDES by name


def span(hour: int, gap_ms: int) -> tuple[int, int]:
    """The hours whose writes ``hour``'s figures depend on."""
    return hour - hour % DAY_HOURS, ((hour + 1) * HOUR_MS + gap_ms - 1) // HOUR_MS


async def compute_hours(
    conn: AsyncConnection, first: int, last: int, team_id: str | None, gap_ms: int
) -> dict[tuple[int, str, str, str], Figures]:
    """The figures of the hours ``[first, last]`` per (hour, team, alias, version), computed
    now from the requests and side rows."""
    a, b = first * HOUR_MS, (last + 1) * HOUR_MS
    day = a // 86_400_000
    lookup = _LOOKUP if a > day * 86_400_000 else "NULL"
    team = " AND team_id = :team" if team_id is not None else ""
    params = {"a": a, "b": b, "ahead": b + gap_ms, "gap": gap_ms, "day": day,
              "day0": day * 86_400_000, "team": team_id}  # fmt: skip
    out: dict[tuple[int, str, str, str], Figures] = {}

    def at(h: Any, t: Any, al: Any, v: Any) -> Figures:
        return out.setdefault((int(h), str(t), str(al), str(v)), {})

    sql = _PATHS_SQL.format(lookup=lookup, team=team)
    for h, t, al, v, *counts in await conn.execute(text(sql), params):
        at(h, t, al, v).update({n: int(c or 0) for n, c in zip(PATHS, counts, strict=True)})
    e_team = " AND e.team_id = :team" if team_id is not None else ""
    for h, t, al, v, value, n in await conn.execute(text(_EVENTS_SQL.format(team=e_team)), params):
        at(h, t, al, v)[{"up": "feedback_up", "down": "feedback_down"}.get(value, value)] = int(n)
    for h, t, al, v, n, grounded in await conn.execute(
        text(_GROUNDING_SQL.format(team=team)), params
    ):
        at(h, t, al, v).update(grounding_samples=int(n), grounded=int(grounded or 0))
    for h, t, al, v, n, total in await conn.execute(text(_REVIEWS_SQL.format(team=team)), params):
        at(h, t, al, v).update(reviews_scored=int(n), review_score_sum=float(total or 0.0))
    return out


def split_current(marks: Marks, hours: Iterable[int], gap_ms: int) -> tuple[list[int], list[int]]:
    """The hours of ``hours`` with a current stored rollup, and those to compute (written to,
    not closed since). An hour without a mark was never written to: it has no figures."""
    closed: list[int] = []
    live: list[int] = []
    for h in hours:
        if h not in marks.writes:
            continue
        (closed if marks.current(h, span(h, gap_ms), gap_ms) else live).append(h)
    return closed, live


async def hour_report(
    conn: AsyncConnection, first: int, last: int, team_id: str | None, gap_ms: int
) -> tuple[list[dict[str, Any]], int]:
    """`insights.quality.quality_report` of the hours ``[first, last]``: closed hours from
    their rollups, the others computed now; and how many hours were computed."""
    marks = await read_marks(conn, HOUR, span(first, gap_ms)[0], span(last, gap_ms)[1])
    closed, live = split_current(marks, range(first, last + 1), gap_ms)
    paths: list[tuple[Key, list[int]]] = []
    sides: list[tuple[Key, dict[str, float]]] = []
    if closed:
        params: dict[str, Any] = {"team": team_id}
        parts = []
        for i, (a, b) in enumerate(runs(closed)):
            params[f"a{i}"], params[f"b{i}"] = a, b
            parts.append(f"hour BETWEEN :a{i} AND :b{i}")
        sql = _CLOSED_SQL.format(
            hours=" OR ".join(parts), team=" AND team_id = :team" if team_id is not None else ""
        )
        for t, al, v, *sums in await conn.execute(text(sql), params):
            key = (0, str(t), str(al), str(v))
            paths.append((key, [int(x) for x in sums[: len(PATHS)]]))
            sides.append(
                (key, dict(zip(SIDES, (float(x) for x in sums[len(PATHS) :]), strict=True)))
            )
    for a, b in runs(live):
        for (_, t, al, v), fig in (await compute_hours(conn, a, b, team_id, gap_ms)).items():
            key = (0, t, al, v)
            paths.append((key, [int(fig.get(n, 0)) for n in PATHS]))
            sides.append((key, {n: fig[n] for n in SIDES if n in fig}))
    return combine(paths, sides), len(live)


async def close_hours(db: Database, hours: Iterable[int], gap_ms: int) -> int:
    """Compute and store the rollups of ``hours`` not current (one query per day's run of
    them); how many were stored."""
    wanted = sorted(set(hours))
    if not wanted:
        return 0
    async with db.engine.connect() as conn:
        marks = await read_marks(conn, HOUR, span(wanted[0], gap_ms)[0],
                                 span(wanted[-1], gap_ms)[1])  # fmt: skip
    _, todo = split_current(marks, wanted, gap_ms)
    by_day: dict[int, list[int]] = {}
    for h in todo:
        by_day.setdefault(h // DAY_HOURS, []).append(h)
    stored = 0
    for day in sorted(by_day, reverse=True):
        day_hours = by_day[day]
        sums = {h: marks.total(*span(h, gap_ms)) for h in day_hours}  # read before computing
        async with db.engine.connect() as conn:
            found = await compute_hours(conn, day_hours[0], day_hours[-1], None, gap_ms)
        for h in day_hours:
            rows = [
                {"hour": h, "team_id": t, "alias": al, "version": v,
                 **{n: int(fig.get(n, 0)) for n in (*PATHS, *SIDES) if n != "review_score_sum"},
                 "review_score_sum": float(fig.get("review_score_sum", 0.0))}
                for (hh, t, al, v), fig in found.items() if hh == h
            ]  # fmt: skip
            tables = ((quality_hours, "hour"),)
            if await store_closed(
                db.engine, db.dialect, HOUR, h, sums[h], gap_ms, tables, {quality_hours.name: rows}
            ):
                stored += 1
    return stored
