"""`AfterInsert`: a table declares what its bulk inserts also run over the rows really added
(the store knows no feature's table), in the same transaction, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, select

from fleetgate.store import Database
from fleetgate.store.after_insert import AfterInsert, after_insert, after_insert_of

NEW_EVENTS = "(SELECT * FROM t_events WHERE id IN (SELECT value FROM json_each(:ids)))"


def _totals(events: str) -> str:
    """Add the events of ``events`` (a table, CTE or subquery) to their name's totals."""
    return (
        "INSERT INTO t_totals (name, events, amount) SELECT e.name, count(*), sum(e.amount) "
        f"FROM {events} e WHERE true GROUP BY e.name ON CONFLICT (name) DO UPDATE SET "
        "events = t_totals.events + excluded.events, amount = t_totals.amount + excluded.amount"
    )


def _pg(sources: Mapping[str, str]) -> str:
    return _totals(sources["t_events"])


COUNT = AfterInsert(sqlite=_totals(NEW_EVENTS), postgresql=_pg)
meta = MetaData()
events = Table(
    "t_events",
    meta,
    Column("id", String(20), primary_key=True),
    Column("name", String(20), nullable=False),
    Column("amount", BigInteger, nullable=False),
    info=after_insert(COUNT),
)
totals = Table(
    "t_totals",
    meta,
    Column("name", String(20), primary_key=True),
    Column("events", Integer, nullable=False),
    Column("amount", BigInteger, nullable=False),
)
plain = Table("t_plain", meta, Column("id", String(20), primary_key=True))


def _event(i: int, name: str = "a") -> dict[str, Any]:
    return {"id": f"e{i}", "name": name, "amount": 10 * i}


async def test_a_table_s_after_insert_runs_over_the_new_rows_only(
    db_url: str, tmp_path: Path
) -> None:
    assert after_insert_of(events) is COUNT and after_insert_of(plain) is None
    db = Database.from_url(db_url, tmp_path)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(meta.create_all)

        def run() -> list[list[int]]:
            bulk = db.bulk_insert([events, plain])
            try:
                first = bulk.insert([[_event(1), _event(2), _event(3, "b")], [{"id": "p"}]])
                # a replayed batch, one new event: only the new one is counted
                again = bulk.insert([[_event(1), _event(2), _event(4)], [{"id": "p"}]])
                none = bulk.insert([[], [{"id": "q"}]])
                return [first, again, none]
            finally:
                bulk.close()

        assert await asyncio.to_thread(run) == [[3, 1], [1, 0], [0, 1]]
        async with db.engine.connect() as conn:
            rows = (await conn.execute(select(totals).order_by(totals.c.name))).all()
        assert [tuple(r) for r in rows] == [("a", 3, 70), ("b", 1, 30)]
    finally:
        async with db.engine.begin() as conn:
            await conn.run_sync(meta.drop_all)
        await db.aclose()
