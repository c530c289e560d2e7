"""`Databases`: one `fleetgate.store.Database` (one engine, one pool) per database URL.

Every feature that keeps durable state (tenancy, conversations, ...) asks for the database of
its URL here instead of opening an engine of its own, and migrates through `migrate`, which runs
the Alembic migrations at most once per database and process.

Example::

    dbs = Databases(MIGRATIONS)                               # the features' revision folders
    db = dbs.get(settings.database_url, settings.data_dir)   # no I/O yet
    await dbs.migrate(db)                                     # to head, once
    ...
    await dbs.aclose()
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from fleetgate.store.database import Database, database_url

__all__ = ["Databases"]


class Databases:
    """Owns the databases of one gateway process, keyed by their driver URL; each is migrated
    with the revision folders ``migrations`` (the features', `fleetgate.app.MIGRATIONS`)."""

    def __init__(self, migrations: Sequence[Path] = ()) -> None:
        self.migrations = tuple(migrations)
        self._open: dict[str, Database] = {}
        self._migrated: set[str] = set()
        self._migrating: dict[str, asyncio.Lock] = {}

    def get(self, url: str | None, data_dir: Path) -> Database:
        """The database at ``url`` (SQLite under ``data_dir`` when unset); one per URL."""
        resolved = database_url(url, data_dir)
        db = self._open.get(resolved)
        if db is None:
            db = self._open[resolved] = Database(resolved, migrations=self.migrations)
        return db

    async def migrate(self, db: Database) -> None:
        """Bring ``db`` to the newest revision, once (later calls return at once)."""
        if db.url in self._migrated:
            return
        lock = self._migrating.setdefault(db.url, asyncio.Lock())
        async with lock:
            if db.url not in self._migrated:
                await db.migrate()
                self._migrated.add(db.url)

    def urls(self) -> list[str]:
        """The driver URLs of the open databases (for diagnostics and tests)."""
        return sorted(self._open)

    async def aclose(self) -> None:
        """Dispose of every engine (idempotent)."""
        opened, self._open = self._open, {}
        self._migrated.clear()
        for db in opened.values():
            await db.aclose()
