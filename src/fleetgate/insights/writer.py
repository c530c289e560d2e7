"""`InsightsWriter`: request rows buffered in memory, written in batches with their rollups.

Each flush is one transaction: the new ``fg_insight_requests`` rows (a request id already
stored is skipped, so a retried flush counts nothing twice), then, for those new rows only,
``fg_insight_user_days`` (sums per day, user and plan) and ``fg_insight_users`` (first day and
plan, first paid day) upserted, and the marks of the days and hours written counted
(`insights.marks`: a closed rollup they feed is no longer current). Reports read the rollups
(`insights.business`, `insights.quality_cache`).

The buffer is bounded (``max_buffered``): past it the oldest rows are dropped and counted
(``dropped``); a failed flush keeps its rows for the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any

from sqlalchemy import case, func
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.insights.marks import DAY, HOUR, bump
from fleetgate.insights.tables import requests, reviews, user_days, user_lasts, users
from fleetgate.store.database import Database
from fleetgate.tasks import Background
from fleetgate.timespans import HOUR_MS

__all__ = ["InsightsWriter", "write_rows"]

log = logging.getLogger("fleetgate.insights")

_BATCH = 5_000


def _rollups(
    rows: Sequence[dict[str, Any]], paid: Collection[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    days: dict[tuple[int, str, str, str], list[int]] = {}
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["created_ms"], r["request_id"])):
        user = row["end_user"]
        if user is None:
            continue
        key = (row["day"], row["team_id"], user, row["plan"])
        sums = days.setdefault(key, [0, 0, 0, 0])
        sums[0] += 1
        sums[1] += row["input_tokens"]
        sums[2] += row["output_tokens"]
        sums[3] += row["cost_nusd"]
        who = (row["team_id"], user)
        seen = first.get(who)
        if seen is None:
            seen = first[who] = {
                "team_id": who[0], "end_user": user, "first_day": row["day"],
                "first_plan": row["plan"], "paid_day": None,
            }  # fmt: skip
        if row["plan"] in paid and seen["paid_day"] is None:
            seen["paid_day"] = row["day"]  # rows are in time order: the first is the least
    day_rows = [
        {"day": d, "team_id": t, "end_user": u, "plan": p, "requests": s[0],
         "input_tokens": s[1], "output_tokens": s[2], "cost_nusd": s[3]}
        for (d, t, u, p), s in days.items()
    ]  # fmt: skip
    return day_rows, list(first.values())


def _upserts(dialect: str) -> tuple[Any, Any]:
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    d = insert(user_days)
    day_stmt = d.on_conflict_do_update(
        index_elements=[user_days.c.day, user_days.c.team_id, user_days.c.end_user,
                        user_days.c.plan],
        set_={name: user_days.c[name] + d.excluded[name]
              for name in ("requests", "input_tokens", "output_tokens", "cost_nusd")},
    )  # fmt: skip
    u = insert(users)
    old, new = users.c, u.excluded
    earlier = new.first_day < old.first_day
    user_stmt = u.on_conflict_do_update(
        index_elements=[old.team_id, old.end_user],
        set_={
            "first_plan": case((earlier, new.first_plan), else_=old.first_plan),
            "first_day": case((earlier, new.first_day), else_=old.first_day),
            "paid_day": case(
                (old.paid_day.is_(None), new.paid_day),
                (new.paid_day.is_(None), old.paid_day),
                (new.paid_day < old.paid_day, new.paid_day),
                else_=old.paid_day,
            ),
        },
    )
    return day_stmt, user_stmt


def _lasts(day_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per user and plan ('': any) of ``day_rows``: its first and last day and the one before
    the last (-1: none)."""
    days: dict[tuple[str, str, str], set[int]] = {}
    for row in day_rows:
        for plan in (row["plan"], ""):
            days.setdefault((row["team_id"], row["end_user"], plan), set()).add(row["day"])
    out = []
    for (team, user, plan), seen in sorted(days.items()):
        ordered = sorted(seen)
        prev = ordered[-2] if len(ordered) > 1 else -1
        out.append({"team_id": team, "end_user": user, "plan": plan, "last_day": ordered[-1],
                    "prev_day": prev, "first_day": ordered[0]})  # fmt: skip
    return out


def _lasts_upsert(dialect: str) -> Any:
    """Merge a batch's (last, previous) day into the stored pair: the two largest distinct
    days of both, whatever order batches come in."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    most = func.greatest if dialect == "postgresql" else func.max
    least = func.least if dialect == "postgresql" else func.min
    stmt = insert(user_lasts)
    old, new = user_lasts.c, stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[old.team_id, old.end_user, old.plan],
        set_={
            "last_day": most(old.last_day, new.last_day),
            "first_day": least(old.first_day, new.first_day),
            "prev_day": most(
                old.prev_day,
                new.prev_day,
                case((old.last_day < new.last_day, old.last_day), else_=-1),
                case((new.last_day < old.last_day, new.last_day), else_=-1),
            ),
        },
    )


async def write_rows(
    db: Database, conn: AsyncConnection, rows: Sequence[dict[str, Any]], paid: Collection[str]
) -> int:
    """Insert ``rows`` (skipping request ids already stored) and roll the new ones up, in
    ``conn``'s transaction; returns how many were new."""
    rows = [{**r, "thread": r["session_id"] if r["conversation_id"] is None
             else r["conversation_id"]} for r in rows]  # fmt: skip
    new_ids = {k[0] for k in await db.insert_new(requests, rows, conn)}
    fresh = []
    for row in rows:  # a request id twice in one batch: its first row is the one stored
        if row["request_id"] in new_ids:
            new_ids.discard(row["request_id"])
            fresh.append(row)
    day_rows, user_rows = _rollups(fresh, paid)
    day_stmt, user_stmt = _upserts(db.dialect)
    if day_rows:
        await conn.execute(day_stmt, day_rows)
    if user_rows:
        await conn.execute(user_stmt, user_rows)
    if day_rows:
        await conn.execute(_lasts_upsert(db.dialect), _lasts(day_rows))
    # last, so that two replicas' flushes hold these row locks only while committing
    await bump(conn, db.dialect, DAY, {r["day"] for r in fresh if r["end_user"] is not None})
    await bump(conn, db.dialect, HOUR, {r["created_ms"] // HOUR_MS for r in fresh})
    return len(fresh)


async def write_reviews(db: Database, rows: Sequence[dict[str, Any]]) -> None:
    """Insert review items (an item already stored is kept) and count their hours' writes."""
    async with db.engine.begin() as conn:
        await db.insert_new(reviews, rows, conn)
        await bump(conn, db.dialect, HOUR, {r["created_ms"] // HOUR_MS for r in rows})


class InsightsWriter:
    """Buffers rows (``add``, from the request path: no I/O) and writes them every
    ``interval_s`` from one task (``start``/``aclose``; ``aclose`` flushes what is left)."""

    def __init__(
        self,
        db: Database,
        paid: Callable[[], Collection[str]],
        *,
        max_buffered: int = 100_000,
        interval_s: float = 2.0,
    ) -> None:
        self.db = db
        self._paid = paid
        self._rows: deque[dict[str, Any]] = deque()
        self._reviews: deque[dict[str, Any]] = deque(maxlen=10_000)  # sampled for review
        self.max_buffered = max_buffered
        self.interval_s = interval_s
        self.dropped = 0
        self._task = Background(self._run, name="insights-writer")
        self._lock = asyncio.Lock()

    def add(self, row: dict[str, Any]) -> None:
        if len(self._rows) >= self.max_buffered:
            self._rows.popleft()
            self.dropped += 1
        self._rows.append(row)

    def add_review(self, row: dict[str, Any]) -> None:
        """A request sampled for human review (``fg_insight_reviews``), written with the rest."""
        self._reviews.append(row)

    def pending(self) -> int:
        return len(self._rows) + len(self._reviews)

    async def flush(self) -> int:
        """Write what is buffered, ``_BATCH`` rows to a transaction; how many were new.
        A failure puts the unwritten rows back (ahead of newer ones) and raises."""
        written = 0
        async with self._lock:
            if self._reviews:
                queued = list(self._reviews)
                self._reviews.clear()
                try:
                    await write_reviews(self.db, queued)
                except BaseException:
                    self._reviews.extend(queued)
                    raise
            while self._rows:
                batch = [self._rows.popleft() for _ in range(min(_BATCH, len(self._rows)))]
                try:
                    async with self.db.engine.begin() as conn:
                        written += await write_rows(self.db, conn, batch, set(self._paid()))
                except BaseException:
                    self._rows.extendleft(reversed(batch))
                    raise
        return written

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.flush()
            except Exception:
                log.exception("insights: writing %d rows failed; retrying", self.pending())

    def start(self) -> None:
        self._task.start()

    async def aclose(self) -> None:
        await self._task.aclose()
        try:
            await self.flush()
        except Exception:
            log.exception("insights: %d rows not written at shutdown", self.pending())
