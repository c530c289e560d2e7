"""Marks: which closed rollups are current, shared by every replica through the store.

A rollup unit is a UTC day of business figures (kind ``b``, `insights.day_rollup`) or a UTC
hour of quality figures (kind ``q``, `insights.hour_rollup`). Its figures depend on the writes
to a span of units (a day: every day up to it, for each user's previous and first day; an
hour: its day's hours up to it and the follow-up window after it). Each unit has a row in
``fg_insight_marks`` whose ``writes`` every write bumps (`bump`) in the transaction that writes
its rows, so a rollup is current exactly when the sum of ``writes`` over its span is still the
sum it was computed at (``closed``), and its ``param`` (the follow-up window) matches.

Closing a unit (`close`): read the span's sum ``s``, compute the figures (statements that start
after that read see every write counted in ``s``), then in one transaction set ``closed = s``
where it was less (or absent), and only if so replace the unit's rows. The update's row lock
orders two replicas closing the same unit: the second finds ``closed`` already ``s`` and stores
nothing (no double count). A write that lands after the read raises the sum past ``s``: the
stored rollup is then stale, never wrong; readers compute that unit from the raw rows until it
is closed again. Sums only grow, so an equal sum means no write since.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import Table, delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from fleetgate.insights.tables import marks

__all__ = ["Marks", "bump", "read_marks", "runs", "store_closed"]

DAY = "b"
HOUR = "q"


async def bump(conn: AsyncConnection, dialect: str, kind: str, units: Collection[int]) -> None:
    """Count a write to each of ``units`` (in the writer's transaction; rows in unit order, so
    two writers lock them in the same order)."""
    if not units:
        return
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = insert(marks)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[marks.c.kind, marks.c.unit],
            set_={"writes": marks.c.writes + 1},
        ),
        [{"kind": kind, "unit": u, "writes": 1, "closed": None, "param": 0} for u in sorted(units)],
    )


class Marks:
    """The marks of one kind read at once: ``writes`` and the stored ``closed``/``param``."""

    def __init__(self, rows: Iterable[Sequence[Any]]) -> None:
        self.writes: dict[int, int] = {}
        self.closed: dict[int, tuple[int, int]] = {}
        for unit, writes, closed, param in rows:
            self.writes[int(unit)] = int(writes)
            if closed is not None:
                self.closed[int(unit)] = (int(closed), int(param))
        self._units = sorted(self.writes)
        self._prefix = [0]
        for unit in self._units:
            self._prefix.append(self._prefix[-1] + self.writes[unit])

    def total(self, first: int, last: int) -> int:
        """The sum of ``writes`` over the units ``[first, last]``."""
        lo, hi = bisect_left(self._units, first), bisect_right(self._units, last)
        return self._prefix[hi] - self._prefix[lo] if hi > lo else 0

    def current(self, unit: int, span: tuple[int, int], param: int = 0) -> bool:
        """Whether ``unit``'s stored rollup is current (computed at its span's sum now)."""
        held = self.closed.get(unit)
        return held is not None and held == (self.total(*span), param)


async def read_marks(conn: AsyncConnection, kind: str, first: int | None, last: int) -> Marks:
    """The marks of ``kind`` for the units ``[first, last]`` (None: from the first)."""
    query = select(marks.c.unit, marks.c.writes, marks.c.closed, marks.c.param).where(
        marks.c.kind == kind, marks.c.unit <= last
    )
    if first is not None:
        query = query.where(marks.c.unit >= first)
    return Marks((await conn.execute(query)).all())


async def store_closed(
    engine: AsyncEngine,
    dialect: str,
    kind: str,
    unit: int,
    closed: int,
    param: int,
    tables: Sequence[tuple[Table, str]],
    rows: dict[str, list[dict[str, Any]]],
) -> bool:
    """Store ``unit``'s rollup ``rows`` (per table name) computed at the span sum ``closed``,
    unless one computed at that sum or later is stored already; True if stored. ``tables``:
    each rollup table and its unit column (the unit's old rows are deleted first)."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    async with engine.begin() as conn:
        await conn.execute(
            insert(marks)
            .values(kind=kind, unit=unit, writes=0, closed=None, param=param)
            .on_conflict_do_nothing()
        )
        won = await conn.execute(
            update(marks)
            .where(
                marks.c.kind == kind,
                marks.c.unit == unit,
                (marks.c.closed.is_(None)) | (marks.c.closed < closed) | (marks.c.param != param),
            )
            .values(closed=closed, param=param)
        )
        if won.rowcount != 1:
            return False  # another replica stored this (or a newer) rollup first
        for table, column in tables:
            await conn.execute(delete(table).where(table.c[column] == unit))
            if rows.get(table.name):
                await conn.execute(table.insert(), rows[table.name])
    return True


def runs(units: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive runs ``(first, last)`` of ``units`` (sorted)."""
    out: list[tuple[int, int]] = []
    for u in sorted(units):
        if out and out[-1][1] == u - 1:
            out[-1] = (out[-1][0], u)
        else:
            out.append((u, u))
    return out
