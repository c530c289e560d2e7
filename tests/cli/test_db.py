"""``fleetgate db migrate``: the schema reaches the newest revision, and again is a no-op."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from fleetgate.app import MIGRATIONS
from fleetgate.cli.main import main
from fleetgate.store.database import database_url
from fleetgate.store.migrate import alembic_config


def _head() -> str:
    head = ScriptDirectory.from_config(alembic_config(MIGRATIONS)).get_current_head()
    assert head is not None
    return head


def test_migrate_sqlite_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "migrate", "--data-dir", str(tmp_path)]) == 0
    assert main(["db", "migrate", "--data-dir", str(tmp_path)]) == 0
    assert "newest revision" in capsys.readouterr().out
    with sqlite3.connect(tmp_path / "fleetgate.db") as conn:
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert version == _head()
    assert "fg_api_keys" in tables


@pytest.mark.postgres
def test_migrate_postgres(shared_pg_url: str, tmp_path: Path) -> None:
    assert main(["db", "migrate", "--database-url", shared_pg_url]) == 0

    async def version() -> str:
        engine = create_async_engine(database_url(shared_pg_url, tmp_path))
        try:
            async with engine.connect() as conn:
                return str(
                    (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
                )
        finally:
            await engine.dispose()

    assert asyncio.run(version()) == _head()


def test_db_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["db"])
    assert "ACTION" in capsys.readouterr().err
