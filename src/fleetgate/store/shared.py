"""State every replica must agree on, in the database: named JSON bodies of a *kind*, with a
version per kind that every change bumps in its own transaction.

A kind is, for example, ``safety_overrides`` (one row per overridden policy or mapping) or
``canary_splits`` (one row per alias). Replicas notice a change by reading the versions
(`SharedVersions.read`, one indexed query for every kind), which
`fleetgate.resources.shared.SharedStates` does for the whole process every quarter second.

The statements are SQLAlchemy Core with the dialect's upsert, so SQLite and PostgreSQL run the
same code.

Example::

    overrides = SharedState(db, "safety_overrides")
    version = await overrides.put("policies:strict", {"input": ["pii"]})
    version, bodies = await overrides.load()      # {"policies:strict": {...}}
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.store.database import Database
from fleetgate.store.tables import shared_state, shared_versions

__all__ = ["SharedState", "bump_version", "dialect_insert", "read_versions", "upsert"]


def dialect_insert(dialect: str) -> Any:
    """The dialect's ``insert`` (it has ``on_conflict_do_update``): PostgreSQL's or SQLite's."""
    return pg_insert if dialect == "postgresql" else sqlite_insert


async def bump_version(conn: AsyncConnection, kind: str) -> int:
    """Add one to ``kind``'s version inside the caller's transaction; returns the new one."""
    stmt = (
        dialect_insert(conn.dialect.name)(shared_versions)
        .values(kind=kind, version=1)
        .on_conflict_do_update(
            index_elements=[shared_versions.c.kind],
            set_={"version": shared_versions.c.version + 1},
        )
        .returning(shared_versions.c.version)
    )
    return int((await conn.execute(stmt)).scalar_one())


async def upsert(conn: AsyncConnection, kind: str, name: str, body: Any) -> None:
    """Write one body of ``kind`` (created or replaced) inside the caller's transaction."""
    now = int(time.time() * 1000)
    stmt = (
        dialect_insert(conn.dialect.name)(shared_state)
        .values(kind=kind, name=name, body=body, updated_ms=now)
        .on_conflict_do_update(
            index_elements=[shared_state.c.kind, shared_state.c.name],
            set_={"body": body, "updated_ms": now},
        )
    )
    await conn.execute(stmt)


async def read_versions(conn: AsyncConnection) -> dict[str, int]:
    """Every kind's version (a kind never changed is absent)."""
    rows = await conn.execute(select(shared_versions.c.kind, shared_versions.c.version))
    return {str(kind): int(version) for kind, version in rows}


class SharedState:
    """The bodies of one kind. Writes are one transaction each, with the version bump."""

    def __init__(self, db: Database, kind: str) -> None:
        if not 0 < len(kind) <= 32:
            raise ValueError(f"a shared state kind has 1-32 characters: {kind!r}")
        self.db = db
        self.kind = kind
        # This process's own writes: how many are in flight, and the newest version one made.
        # A snapshot read before them is stale here (`SharedStates.refresh` does not hand it on).
        self.writing = 0
        self.written = 0

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        self.writing += 1
        try:
            async with self.db.engine.begin() as conn:
                yield conn
        finally:
            self.writing -= 1

    def _wrote(self, version: int) -> int:
        self.written = max(self.written, version)
        return version

    def stale(self, version: int) -> bool:
        """Whether a snapshot at ``version`` may predate this process's own writes (one in
        flight, or a newer one made): handing it to followers would undo a change they have."""
        return self.writing > 0 or version < self.written

    async def load(self) -> tuple[int, dict[str, Any]]:
        """``(version, {name: body})`` read in one transaction."""
        async with self.db.engine.connect() as conn:
            version = await conn.scalar(
                select(shared_versions.c.version).where(shared_versions.c.kind == self.kind)
            )
            rows = await conn.execute(
                select(shared_state.c.name, shared_state.c.body).where(
                    shared_state.c.kind == self.kind
                )
            )
            return int(version or 0), {str(name): body for name, body in rows}

    async def put(self, name: str, body: Any) -> int:
        """Create or replace ``name``; returns the kind's new version."""
        async with self._write() as conn:
            await upsert(conn, self.kind, name, body)
            return self._wrote(await bump_version(conn, self.kind))

    async def put_stamped(self, name: str, build: Callable[[int], Any]) -> int:
        """Like `put`, with the body built from the kind's new version (a revision stamp)."""
        async with self._write() as conn:
            version = await bump_version(conn, self.kind)
            await upsert(conn, self.kind, name, build(version))
            return self._wrote(version)

    async def put_many(self, bodies: Mapping[str, Any]) -> int:
        """Create or replace several bodies at once (one version step)."""
        async with self._write() as conn:
            for name, body in bodies.items():
                await upsert(conn, self.kind, name, body)
            return self._wrote(await bump_version(conn, self.kind))

    async def delete(self, name: str) -> int:
        """Remove ``name`` (absent: nothing changes but the version); returns the new version."""
        async with self._write() as conn:
            await conn.execute(
                delete(shared_state).where(
                    shared_state.c.kind == self.kind, shared_state.c.name == name
                )
            )
            return self._wrote(await bump_version(conn, self.kind))
