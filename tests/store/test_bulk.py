"""Bulk inserts from a worker thread: values clamped to their columns, idempotent, and a
refusal for the data told apart from a store that is away."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fleetgate.app import MIGRATIONS
from fleetgate.errors import RecordRefused
from fleetgate.store import Database
from fleetgate.tenancy.tables import request_audit, spend, spend_tags


def _row(rid: str, **fields: Any) -> dict[str, Any]:
    row = {"request_id": rid, "created_ms": 1, "key_id": "k", "team_id": "t", "alias": "a",
           "deployment": "d", "version": "v", "status": 200, "input_tokens": 1,
           "output_tokens": 1, "cached_tokens": 0, "cost_nusd": 7, "latency_ms": 1,
           "tags": {"env": "x"}}  # fmt: skip
    row.update(fields)
    return row


async def _in_thread(db: Database, rows: list[list[dict[str, Any]]]) -> list[int]:
    def run() -> list[int]:
        bulk = db.bulk_insert([spend, spend_tags, request_audit])
        try:
            return bulk.insert(rows)
        finally:
            bulk.close()

    return await asyncio.to_thread(run)


async def test_values_out_of_range_are_clamped_by_every_store(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        long = _row("long", alias="m" * 300, status=2**40, deployment="a\x00b", tags={"e": "\x00"})
        rows = [[long, _row("ok")], [{"request_id": "long", "tag": "t" * 400}], []]
        assert await _in_thread(db, rows) == [2, 1, 0]
        assert await _in_thread(db, rows) == [0, 0, 0]  # a replay counts nothing twice
        async with db.engine.connect() as conn:
            got = (await conn.execute(select(spend).where(spend.c.request_id == "long"))).one()
            tag = await conn.scalar(select(spend_tags.c.tag))
        assert (got.alias, got.status, got.tags) == ("m" * 200, 2**31 - 1, {"e": "\x00"})
        assert got.deployment == "a\ufffdb"  # PostgreSQL cannot hold a NUL, SQLite cut at it
        assert tag == "t" * 300
    finally:
        await db.aclose()


async def test_a_row_the_store_refuses_raises_record_refused(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        for bad in (_row("r", key_id=None), _row("r", created_ms="yesterday")):
            if db.dialect == "sqlite" and bad["key_id"] is not None:
                continue  # SQLite stores text in an integer column
            with pytest.raises(RecordRefused):
                await _in_thread(db, [[bad, _row("ok")], [], []])
        async with db.engine.connect() as conn:
            assert (await conn.execute(select(spend))).all() == []  # all or nothing
    finally:
        await db.aclose()


async def test_a_store_that_is_away_is_not_a_refusal(tmp_path: Path) -> None:
    db = Database(
        "postgresql+asyncpg://postgres@127.0.0.1:1/none",
        connect_timeout_s=0.5,
        migrations=MIGRATIONS,
    )
    try:
        with pytest.raises(Exception) as err:
            await _in_thread(db, [[_row("r")], [], []])
        assert not isinstance(err.value, RecordRefused)
    finally:
        await db.aclose()
