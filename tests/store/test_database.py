"""The store: migrations to head on SQLite and PostgreSQL, idempotent inserts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, func, insert, inspect, select, text

from fleetgate.app import MIGRATIONS
from fleetgate.multimodal.tables import conversation_turns, conversations
from fleetgate.store import Database, database_url
from fleetgate.store.migrate import alembic_config
from fleetgate.store.tables import metadata
from fleetgate.tenancy.tables import spend, tenancy_state

EXPECTED = {
    "fg_teams", "fg_users", "fg_api_keys", "fg_spend", "fg_spend_tags", "fg_request_audit",
    "fg_admin_audit", "fg_budget_alerts", "fg_tenancy_state", "alembic_version",
    "mm_conversations", "mm_turns",
}  # fmt: skip


def _to(revision: str, down: bool = False) -> Callable[[Connection], None]:
    """Run the migrations up (or down) to ``revision`` on a connection."""

    def run(conn: Connection) -> None:
        cfg = alembic_config(MIGRATIONS)
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)

    return run


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


def _row(request_id: str, cost: int) -> dict[str, object]:
    return {
        "request_id": request_id, "created_ms": 1, "key_id": "k", "team_id": "t",
        "alias": "a", "deployment": "d", "version": "v1", "status": 200, "input_tokens": 1,
        "output_tokens": 2, "cached_tokens": 0, "cost_nusd": cost, "latency_ms": 3, "tags": {},
    }  # fmt: skip


def test_default_url_is_sqlite_in_data_dir(tmp_path: Path) -> None:
    assert database_url(None, tmp_path) == f"sqlite+aiosqlite:///{tmp_path.resolve()}/fleetgate.db"
    assert database_url("postgresql://u@h/db", tmp_path) == "postgresql+asyncpg://u@h/db"


async def test_migrations_create_every_table_and_rerun_safely(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        # several processes may start at once: concurrent migrations must not collide
        await asyncio.gather(db.migrate(), db.migrate()) if db.dialect == "postgresql" else None
        await db.migrate()
        await db.migrate()
        async with db.engine.connect() as conn:
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
            version = await conn.scalar(select(tenancy_state.c.version))
        assert EXPECTED <= names
        assert version == 1
    finally:
        await db.aclose()


async def test_insert_ignore_counts_each_request_once(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        assert await db.insert_ignore(spend, [_row("r1", 10), _row("r2", 20)]) == 2
        assert await db.insert_ignore(spend, [_row("r2", 20), _row("r3", 30)]) == 1
        async with db.engine.connect() as conn:
            total = await conn.scalar(select(func.sum(spend.c.cost_nusd)))
        assert total == 60
    finally:
        await db.aclose()


async def test_0003_backfills_the_team_of_old_admin_rows_and_downgrades(
    db_url: str, tmp_path: Path
) -> None:
    to = _to
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(to("0002"))
            await conn.execute(text(
                "INSERT INTO fg_admin_audit (created_ms, actor_key_id, actor_team_id, action, "
                "target, detail) VALUES (1, 'key_1', 'team_1', 'key.create', 'key_2', '{}')"
            ))  # fmt: skip
            await conn.run_sync(to("head"))
            rows = (await conn.execute(text("SELECT team_id FROM fg_admin_audit"))).all()
            assert [r.team_id for r in rows] == ["team_1"]
            await conn.run_sync(to("0002", down=True))
            await conn.run_sync(to("head"))
    finally:
        await db.aclose()


async def test_0004_creates_the_conversation_tables_and_downgrades(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(_to("0003"))
            assert not {"mm_conversations", "mm_turns"} & await conn.run_sync(_tables)
            await conn.run_sync(_to("0004"))
            assert {"mm_conversations", "mm_turns"} <= await conn.run_sync(_tables)
            indexes = await conn.run_sync(
                lambda c: {i["name"] for i in inspect(c).get_indexes("mm_conversations")}
            )
            assert "ix_mm_conversations_tenant" in indexes
            await conn.run_sync(_to("0003", down=True))
            assert not {"mm_conversations", "mm_turns"} & await conn.run_sync(_tables)
            assert "fg_admin_audit" in await conn.run_sync(_tables)  # 0003's tables stay
            await conn.run_sync(_to("head"))
            assert {"mm_conversations", "mm_turns"} <= await conn.run_sync(_tables)
    finally:
        await db.aclose()


async def test_0004_keeps_conversations_the_store_created_itself_before(
    db_url: str, tmp_path: Path
) -> None:
    """Before 0004 the conversation store ran ``create_all`` on the same database: upgrading
    such a database keeps its tables and rows."""
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(_to("0003"))
            await conn.run_sync(
                lambda c: metadata.create_all(c, tables=[conversations, conversation_turns])
            )
            await conn.execute(insert(conversations).values(id="c1", tenant="t", created_at=1.0))
            await conn.execute(
                insert(conversation_turns).values(
                    conversation_id="c1", seq=0, role="user", content="hi", created_at=1.0
                )
            )
            await conn.run_sync(_to("head"))
            version = await conn.scalar(text("SELECT version_num FROM alembic_version"))
            assert (
                version
                == ScriptDirectory.from_config(alembic_config(MIGRATIONS)).get_current_head()
            )
            turns = (await conn.execute(select(conversation_turns.c.content))).all()
            assert [t.content for t in turns] == ["hi"]
    finally:
        await db.aclose()
