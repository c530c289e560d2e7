"""`Database`: one async engine for SQLite (embedded default) and PostgreSQL, one code path.

Example::

    db = Database.from_url(None, data_dir, migrations=MIGRATIONS)  # sqlite in data_dir
    await db.migrate()                         # Alembic, programmatically, to every head
    await db.insert_ignore(spend, rows)        # INSERT ... ON CONFLICT DO NOTHING
    bulk = db.bulk_insert([spend])             # the same from a worker thread, own connection
    await db.aclose()

``migrations`` are the features' revision folders (``fleetgate.app.MIGRATIONS``: the store
imports no feature, so whoever opens a database says which schema it has).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Table, event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from fleetgate.store.bulk import BulkInsert, PostgresBulkInsert, SqliteBulkInsert

__all__ = ["Database", "database_url"]


def database_url(url: str | None, data_dir: Path) -> str:
    """The async driver URL: ``postgresql://`` → asyncpg, ``sqlite://`` → aiosqlite."""
    if not url:
        return f"sqlite+aiosqlite:///{(data_dir / 'fleetgate.db').resolve()}"
    if url.startswith(("postgres://", "postgresql://")):
        return "postgresql+asyncpg://" + url.split("://", 1)[1]
    if url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + url.split("://", 1)[1]
    return url


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


class Database:
    """The store's engine plus the few operations every writer shares."""

    def __init__(
        self, url: str, *, connect_timeout_s: float = 3.0, migrations: Sequence[Path] = ()
    ) -> None:
        self.url = url
        self.migrations = tuple(migrations)  # the features' revision folders
        self.connect_timeout_s = connect_timeout_s
        self.busy_timeout_s = 5.0  # how long a SQLite writer waits for a lock held elsewhere
        self._insert_stmts: dict[str, Any] = {}
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if self.dialect == "postgresql":
            kwargs["connect_args"] = {
                "timeout": connect_timeout_s,
                "command_timeout": max(5.0, connect_timeout_s * 2),
            }
            kwargs["pool_size"] = 5
            kwargs["max_overflow"] = 5
        elif parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)

    @classmethod
    def from_url(
        cls, url: str | None, data_dir: Path, *, migrations: Sequence[Path] = ()
    ) -> Database:
        return cls(database_url(url, data_dir), migrations=migrations)

    async def migrate(self) -> None:
        """Bring the schema to the newest revision of every branch of the ground floor's and
        the features' migrations (safe with several processes at once)."""
        from fleetgate.store.migrate import upgrade_to_heads

        if not self.migrations:
            raise ValueError(
                "no feature migrations: open the database with migrations=<the features' "
                "revision folders> (fleetgate.app.MIGRATIONS)"
            )
        await upgrade_to_heads(self.engine, self.migrations)

    async def insert_ignore(
        self, table: Table, rows: Sequence[dict[str, Any]], conn: AsyncConnection | None = None
    ) -> int:
        """Insert rows, skipping any whose primary key exists; returns how many were new."""
        return len(await self.insert_new(table, rows, conn))

    async def insert_new(
        self, table: Table, rows: Sequence[dict[str, Any]], conn: AsyncConnection | None = None
    ) -> list[tuple[Any, ...]]:
        """Insert rows, skipping any whose primary key exists; returns the new rows' keys."""
        if not rows:
            return []
        if conn is None:
            async with self.engine.begin() as own:
                return await self._insert_new(own, table, rows)
        return await self._insert_new(conn, table, rows)

    async def _insert_new(
        self, conn: AsyncConnection, table: Table, rows: Sequence[dict[str, Any]]
    ) -> list[tuple[Any, ...]]:
        # One cached statement run as executemany (SQLAlchemy batches it into multi-row
        # VALUES itself): compiling a fresh multi-row statement per batch cost more CPU on the
        # event loop than the whole request path. RETURNING counts the rows really inserted.
        stmt = self._insert_stmts.get(table.name)
        if stmt is None:
            insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
            key = list(table.primary_key.columns)
            stmt = insert(table).on_conflict_do_nothing().returning(*key)
            self._insert_stmts[table.name] = stmt
        result = await conn.execute(stmt, list(rows))
        return [tuple(r) for r in result.all()]

    def bulk_insert(self, tables: Sequence[Table]) -> BulkInsert:
        """A `fleetgate.store.bulk.BulkInsert` into ``tables`` with a connection of its own,
        opened on first use (call it from one worker thread only)."""
        url = make_url(self.url)
        if self.dialect == "postgresql":
            dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
            return PostgresBulkInsert(
                dsn, tables, connect_timeout_s=self.connect_timeout_s,
                command_timeout_s=max(15.0, self.connect_timeout_s * 2),
            )  # fmt: skip
        if self.dialect == "sqlite" and url.database and url.database != ":memory:":
            return SqliteBulkInsert(url.database, tables, busy_timeout_s=self.busy_timeout_s)
        raise ValueError(f"no bulk insert for {self.dialect} ({self.url.split(':', 1)[0]})")

    async def aclose(self) -> None:
        await self.engine.dispose()
