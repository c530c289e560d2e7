"""`Databases`: one `Database` per URL, migrated at most once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import inspect

from fleetgate.app import MIGRATIONS
from fleetgate.resources import Databases
from fleetgate.store import Database


async def test_one_database_per_url(tmp_path: Path) -> None:
    dbs = Databases(MIGRATIONS)
    try:
        default = dbs.get(None, tmp_path)
        same = dbs.get(f"sqlite:///{(tmp_path / 'fleetgate.db').resolve()}", tmp_path)
        assert same is default  # the default URL and its spelled-out form are one database
        other = dbs.get(f"sqlite:///{tmp_path / 'other.db'}", tmp_path)
        assert other is not default
        assert len(dbs.urls()) == 2
    finally:
        await dbs.aclose()
    assert dbs.urls() == []


async def test_migrate_runs_once_per_database_even_when_asked_concurrently(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    real = Database.migrate

    async def counted(self: Database) -> None:
        runs.append(self.url)
        await real(self)

    monkeypatch.setattr(Database, "migrate", counted)
    dbs = Databases(MIGRATIONS)
    try:
        db = dbs.get(db_url, tmp_path)
        await asyncio.gather(dbs.migrate(db), dbs.migrate(db))
        await dbs.migrate(dbs.get(db_url, tmp_path))
        assert runs == [db.url]
        async with db.engine.connect() as conn:
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert {"fg_api_keys", "mm_conversations", "mm_turns"} <= names
    finally:
        await dbs.aclose()


async def test_a_database_opened_again_after_close_is_migrated_again(tmp_path: Path) -> None:
    dbs = Databases(MIGRATIONS)
    first = dbs.get(None, tmp_path)
    await dbs.migrate(first)
    await dbs.aclose()
    second = dbs.get(None, tmp_path)
    try:
        assert second is not first
        await dbs.migrate(second)  # a new engine: the (idempotent) migration runs on it
    finally:
        await dbs.aclose()
