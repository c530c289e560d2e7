"""The spend rollup kept by every writer: the migration's backfill, the bulk insert of the
record writer (one bad row sets itself aside, the rest is written; two writers at once), on
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import Connection, func, insert, select

from fleetgate.app import MIGRATIONS
from fleetgate.store import Database
from fleetgate.store.migrate import alembic_config
from fleetgate.tenancy.deadletters import DeadLetters
from fleetgate.tenancy.records import TABLES, RecordSink, rows_by_table
from fleetgate.tenancy.tables import spend, spend_rollup, spend_tags
from tests.tenancy.rollup_check import assert_reports_match_raw, records, report_totals, write


def _migrate(revision: str, down: bool = False) -> Any:
    def run(conn: Connection) -> None:
        cfg = alembic_config(MIGRATIONS)
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)

    return run


async def test_the_migration_rolls_up_the_spend_rows_already_there(
    db_url: str, tmp_path: Path
) -> None:
    rng = random.Random(11)
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(_migrate("0010"))
            rows = rows_by_table(records(rng, 600))
            await conn.execute(insert(spend), rows[0])
            await conn.execute(insert(spend_tags), rows[1])
            await conn.run_sync(_migrate("head"))
        assert await assert_reports_match_raw(db, rng, n_ranges=6) > 100
        async with db.engine.begin() as conn:  # down and up again: the same rollup
            before = (await conn.execute(select(func.count()).select_from(spend_rollup))).scalar()
            await conn.run_sync(_migrate("0010", down=True))
            await conn.run_sync(_migrate("head"))
            after = (await conn.execute(select(func.count()).select_from(spend_rollup))).scalar()
        assert before == after and before is not None and before > 600
    finally:
        await db.aclose()


async def test_one_bad_record_is_set_aside_and_the_rollup_keeps_the_rest(
    db_url: str, tmp_path: Path
) -> None:
    """A record the store refuses goes to the dead-letter file; the records around it, and
    their rollup, are written. Costs that sum past 64 bits stop at the largest value."""
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        batch = records(random.Random(2), 40)
        for rec in batch:
            rec["row"].update(team_id="team_b", created_ms=batch[0]["row"]["created_ms"])
        batch[7]["row"]["key_id"] = None  # NOT NULL: refused
        for rec in batch[20:22]:
            rec["row"]["cost_nusd"] = 2**63 - 1
        sink = RecordSink(lambda: db.bulk_insert(TABLES), DeadLetters(tmp_path / "dead.jsonl"))
        progress = await asyncio.to_thread(sink.write, batch, 500)
        await asyncio.to_thread(sink.close)
        assert (progress.handled, progress.new, progress.refused) == (40, 39, 1)
        totals = await report_totals(db, ["team"], None, None, None)
        assert totals[("team_b",)][0] == 2**63 - 1 and totals[("team_b",)][1] == 39
        async with db.engine.connect() as conn:
            count = await conn.scalar(select(func.count()).select_from(spend))
        assert count == 39
    finally:
        await db.aclose()


async def test_two_writers_at_once_count_every_record_once(db_url: str, tmp_path: Path) -> None:
    """Two replicas' writers adding to the same hours and groups at the same time: no
    deadlock (rollup rows are locked in key order), nothing lost or counted twice."""
    rng = random.Random(7)
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        recs = records(rng, 1600)
        a = [recs[i : i + 100] for i in range(0, 800, 100)]
        b = [recs[i : i + 100] for i in range(800, 1600, 100)]
        for _ in range(3):  # three rounds of both at once (bounded)
            await asyncio.wait_for(asyncio.gather(write(db, a), write(db, b)), timeout=120)
        assert await assert_reports_match_raw(db, rng, n_ranges=3) > 50
        totals = await report_totals(db, [], None, None, None)
        assert totals[()][1] == 1600
    finally:
        await db.aclose()
