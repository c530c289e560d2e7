"""`KeyUse`: when each key was last used (``fg_api_keys.last_used_ms``), for key audits.

The request path only notes the key in a dict (`seen`, no I/O); a background task writes the
noted keys in one batched ``UPDATE`` every ``flush_s``. A key is noted at most once per
``every_s`` (a minute) per process, so the column is at most that stale and a busy key costs
one row write a minute, not one per request. A write never moves the time backwards (two
replicas may write the same key out of order).

Example::

    use = KeyUse(db)
    use.seen("key_ab12")          # on the request path: a dict write
    await use.flush()             # in the background: one UPDATE for every key noted
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sqlalchemy import bindparam, or_, update

from fleetgate.store.database import Database
from fleetgate.tenancy.tables import api_keys

__all__ = ["KeyUse"]

log = logging.getLogger("fleetgate.tenancy")


class KeyUse:
    """Keys' last use, noted in memory and written in batches."""

    def __init__(
        self,
        db: Database,
        *,
        every_s: float = 60.0,
        flush_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.every_s = every_s
        self.flush_s = flush_s
        self._clock = clock
        self._noted: dict[str, float] = {}  # key id -> when it was last noted (seconds)
        self._pending: dict[str, int] = {}  # key id -> last use (ms) not yet written

    def seen(self, key_id: str) -> None:
        """Note a use of ``key_id`` (a dict lookup; written at most once per ``every_s``)."""
        now = self._clock()
        last = self._noted.get(key_id)
        if last is not None and now - last < self.every_s:
            return
        self._noted[key_id] = now
        self._pending[key_id] = int(now * 1000)

    def pending(self) -> int:
        return len(self._pending)

    def forget(self, keep: set[str]) -> None:
        """Drop what is noted of keys that are gone (revoked, deleted): bounded by live keys."""
        for key_id in set(self._noted) - keep:
            self._noted.pop(key_id, None)

    async def flush(self) -> int:
        """Write the noted uses in one statement; returns how many keys were written. On a
        failure the uses stay noted for the next flush (a newer use of a key wins)."""
        if not self._pending:
            return 0
        batch, self._pending = self._pending, {}
        t = api_keys.c
        statement = (
            update(api_keys)
            .where(t.id == bindparam("key_id"))
            .where(or_(t.last_used_ms.is_(None), t.last_used_ms < bindparam("used_ms")))
            .values(last_used_ms=bindparam("used_ms"))
        )
        rows = [{"key_id": k, "used_ms": ms} for k, ms in sorted(batch.items())]
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(statement, rows)
        except Exception:
            for key_id, ms in batch.items():
                self._pending[key_id] = max(ms, self._pending.get(key_id, ms))
            raise
        return len(rows)

    async def run(self) -> None:
        """Flush every ``flush_s`` until cancelled (a failed write is retried next time)."""
        while True:
            await asyncio.sleep(self.flush_s)
            try:
                await self.flush()
            except Exception as exc:
                log.warning("could not record keys' last use (%d waiting): %s", self.pending(), exc)
