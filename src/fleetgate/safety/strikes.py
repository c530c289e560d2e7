"""`StrikeCounter`: safety violations per key, counted in the database so that every replica
adds to the same count (``fg_safety_strikes``) and a key is suspended after ``suspend_after``
violations wherever they happened.

Example::

    strikes = StrikeCounter(db)
    if await strikes.add("key-1") >= 5:
        await suspend("key-1")
"""

from __future__ import annotations

import time

from sqlalchemy import select

from fleetgate.safety.tables import safety_strikes
from fleetgate.store.database import Database
from fleetgate.store.shared import dialect_insert

__all__ = ["StrikeCounter"]


class StrikeCounter:
    """Atomic per-key violation counts shared by every process using ``db`` (migrated)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, key_id: str) -> int:
        """Count one violation of ``key_id``; returns its total so far (one statement)."""
        insert = dialect_insert(self.db.dialect)
        now = int(time.time() * 1000)
        stmt = (
            insert(safety_strikes)
            .values(key_id=key_id, count=1, updated_ms=now)
            .on_conflict_do_update(
                index_elements=[safety_strikes.c.key_id],
                set_={"count": safety_strikes.c.count + 1, "updated_ms": now},
            )
            .returning(safety_strikes.c.count)
        )
        async with self.db.engine.begin() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def count(self, key_id: str) -> int:
        """The violations counted for ``key_id`` (0 when none)."""
        async with self.db.engine.connect() as conn:
            found = await conn.scalar(
                select(safety_strikes.c.count).where(safety_strikes.c.key_id == key_id)
            )
        return int(found or 0)
