"""Which replica acts: a lease row in the shared database (SQLite or PostgreSQL, no Redis).

One row of ``fg_shared_state`` (kind ``reclaim_lease``, name ``leader``) names the holder; its
``updated_ms`` is the holder's last renewal. Renewing is a compare-and-set on the stamp the
holder wrote itself (another replica that took the row over wrote a newer stamp, so a late
renewal changes nothing); taking deletes a row older than ``ttl_s`` and inserts one (ON
CONFLICT DO NOTHING: of two replicas trying at once, one gets it). No version is bumped: the
row is not a followed kind.

Example::

    lease = DatabaseLease(db, "reclaim_lease", owner="replica-1", ttl_s=15)
    if await lease.step():
        ...  # this replica acts until the next step
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy import delete, update

from fleetgate.store.database import Database
from fleetgate.store.shared import dialect_insert
from fleetgate.store.tables import shared_state

__all__ = ["DatabaseLease"]

log = logging.getLogger("fleetgate.reclaim")

_NAME = "leader"


class DatabaseLease:
    """A lease named ``kind`` in ``db`` for ``ttl_s`` seconds, held by ``owner`` or not."""

    def __init__(
        self,
        db: Database,
        kind: str,
        *,
        owner: str,
        ttl_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.kind = kind
        self.owner = owner
        self.ttl_s = ttl_s
        self._clock = clock
        self._stamp: int | None = None  # the updated_ms this replica last wrote

    @property
    def leader(self) -> bool:
        """Held as of the last step that reached the database (stale after ``ttl_s``)."""
        return self._stamp is not None and self._clock() * 1000 - self._stamp < self.ttl_s * 1000

    async def step(self) -> bool:
        """Renew the lease or try to take it; True while this replica holds it. A database
        error counts as not holding it."""
        now = int(self._clock() * 1000)
        try:
            held = await (self._renew(now) if self._stamp is not None else self._take(now))
        except Exception as exc:  # the database away: not acting until it answers again
            log.warning("reclaim lease: %s", exc)
            held = False
        was, self._stamp = self._stamp is not None, now if held else None
        if held != was:
            log.info("reclaim lease: %s", "acting replica" if held else "not acting")
        return held

    async def _renew(self, now: int) -> bool:
        row = shared_state.c
        async with self.db.engine.begin() as conn:
            moved = await conn.execute(
                update(shared_state)
                .where(row.kind == self.kind, row.name == _NAME, row.updated_ms == self._stamp)
                .values(updated_ms=now, body={"owner": self.owner})
            )
        return moved.rowcount == 1

    async def _take(self, now: int) -> bool:
        row = shared_state.c
        async with self.db.engine.begin() as conn:
            await conn.execute(
                delete(shared_state).where(
                    row.kind == self.kind,
                    row.name == _NAME,
                    row.updated_ms < now - int(self.ttl_s * 1000),
                )
            )
            insert = dialect_insert(conn.dialect.name)(shared_state)
            taken = await conn.execute(
                insert.values(kind=self.kind, name=_NAME, body={"owner": self.owner},
                              updated_ms=now)
                .on_conflict_do_nothing()
                .returning(row.name)
            )  # fmt: skip
            return taken.first() is not None

    async def release(self) -> None:
        """Give the lease up (another replica takes it at its next step)."""
        stamp, self._stamp = self._stamp, None
        if stamp is None:
            return
        row = shared_state.c
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    delete(shared_state).where(
                        row.kind == self.kind, row.name == _NAME, row.updated_ms == stamp
                    )
                )
        except Exception as exc:
            log.warning("reclaim lease not released (it lapses after %.0fs): %s", self.ttl_s, exc)
