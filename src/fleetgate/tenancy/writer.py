"""`RecordWriter`: spend and request-audit records, spooled at once, written in batches.

``submit`` (on the request path, in a stage's ``after``) appends the record to the current
spool segment (a ``write``: it survives the process being killed; with ``fsync`` the segment is
also synced to disk every flush interval, off the loop, so a lost host loses at most that) and
queues it; a background task writes queued records in batches with
``INSERT ... ON CONFLICT DO NOTHING``. When the database is unreachable the records wait (in
memory up to ``max_pending``, beyond that only in the spool file) and are written when it
returns. Orphaned segments (a crash) are replayed at start and periodically.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetgate.store.database import Database
from fleetgate.store.tables import request_audit, safety_audit, spend, spend_tags
from fleetgate.tasks import cancel_and_wait
from fleetgate.tenancy.journal import Segment, Spool

__all__ = ["RecordWriter"]

log = logging.getLogger("fleetgate.tenancy.writer")


class RecordWriter:
    """Durable, batched, idempotent writes of ``spend``, ``audit`` and ``safety`` records."""

    def __init__(
        self,
        db: Database,
        spool_dir: Path,
        *,
        batch_size: int = 500,
        flush_interval_s: float = 0.2,
        segment_max_s: float = 5.0,
        replay_interval_s: float = 5.0,
        max_pending: int = 200_000,
        fsync: bool = True,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.db = db
        self.spool = Spool(spool_dir)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.segment_max_s = segment_max_s
        self.replay_interval_s = replay_interval_s
        self.max_pending = max_pending
        self.fsync = fsync
        self._on_error = on_error
        self._current: Segment | None = None
        self._closed: list[Segment] = []
        self._task: asyncio.Task[None] | None = None
        self._healthy = True
        self.written = 0  # records the database accepted as new

    @property
    def healthy(self) -> bool:
        """False while the last write to the database failed."""
        return self._healthy

    def submit(self, kind: str, row: dict[str, Any]) -> None:
        """Spool and queue one record (``kind``: ``spend``, ``audit`` or ``safety``)."""
        self.submit_all([(kind, row)])

    def submit_all(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Spool (in one write) and queue several records."""
        if not records:
            return
        if self._current is None:
            self._current = self.spool.open_segment()
        self._current.append(*({"kind": kind, "row": row} for kind, row in records))

    async def start(self) -> None:
        """Replay what a previous run left behind, then write in the background."""
        await self.replay_orphans()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="record-writer")

    async def stop(self) -> None:
        """Write everything still queued; what cannot be written stays spooled."""
        await cancel_and_wait(self._task)
        self._task = None
        if self._current is not None:
            self._closed.append(self._current)
            self._current = None
        await self.flush()
        for seg in self._closed:
            if self.fsync:
                seg.sync()
            seg.close()  # left on disk: replayed by the next start
        self._closed.clear()

    def pending(self) -> int:
        segs = [*self._closed, *([self._current] if self._current else [])]
        return sum(len(s.pending) if s.pending is not None else s.appended for s in segs)

    async def _run(self) -> None:
        last_replay = time.monotonic()
        while True:
            await asyncio.sleep(self.flush_interval_s)
            if self.fsync:
                await self._sync()
            await self.flush()
            if self._healthy and time.monotonic() - last_replay > self.replay_interval_s:
                last_replay = time.monotonic()
                await self.replay_orphans()

    async def _sync(self) -> None:
        """fsync every segment with unsynced records, off the event loop: the spool survives a
        lost host too, up to one flush interval."""
        segs = [*self._closed, *([self._current] if self._current else [])]
        for seg in segs:
            if seg.appended > seg.synced:
                try:
                    await asyncio.to_thread(seg.sync)
                except OSError as exc:
                    log.warning("spool fsync failed: %s", exc)

    async def flush(self) -> None:
        """Write every queued record now (stops at the first database error)."""
        cur = self._current
        if cur is not None and cur.appended and time.monotonic() - cur.opened > self.segment_max_s:
            self._closed.append(cur)
            self._current = cur = None
        self._bound_memory()
        for seg in [*self._closed, *([cur] if cur is not None else [])]:
            if not await self._drain(seg):
                return
            if seg is not cur:
                self._closed.remove(seg)
                seg.close()
                seg.path.unlink(missing_ok=True)

    def _bound_memory(self) -> None:
        total = self.pending()
        for seg in self._closed:
            if total <= self.max_pending:
                break
            if seg.pending is not None:
                total -= len(seg.pending)
                seg.pending = None  # replay from its file instead

    async def _drain(self, seg: Segment) -> bool:
        if seg.pending is None:
            records = Spool.read(seg.path)
            if not await self._write_all(records):
                return False
            seg.pending = []
            return True
        # Only what was queued when the flush began: records keep arriving during the writes,
        # and chasing them turned one flush into an endless run of two-record batches.
        remaining = len(seg.pending)
        while remaining > 0:
            batch = seg.pending[: min(self.batch_size, remaining)]
            if not await self._write(batch):
                return False
            del seg.pending[: len(batch)]
            remaining -= len(batch)
        return True

    async def _write_all(self, records: list[dict[str, Any]]) -> bool:
        for i in range(0, len(records), self.batch_size):
            if not await self._write(records[i : i + self.batch_size]):
                return False
        return True

    async def _write(self, records: list[dict[str, Any]]) -> bool:
        spend_rows = [r["row"] for r in records if r["kind"] == "spend"]
        audit_rows = [r["row"] for r in records if r["kind"] == "audit"]
        safety_rows = [r["row"] for r in records if r["kind"] == "safety"]
        tag_rows = [
            {"request_id": row["request_id"], "tag": f"{k}={v}"}
            for row in spend_rows
            for k, v in sorted(row.get("tags", {}).items())
        ]
        try:
            async with asyncio.timeout(15):
                async with self.db.engine.begin() as conn:
                    new = await self.db.insert_ignore(spend, spend_rows, conn)
                    await self.db.insert_ignore(spend_tags, tag_rows, conn)
                    await self.db.insert_ignore(request_audit, audit_rows, conn)
                    await self.db.insert_ignore(safety_audit, safety_rows, conn)
        except Exception as exc:  # any store failure: keep the records, retry later
            if self._healthy:
                log.warning("spend/audit write failed, records stay spooled: %s", exc)
            self._healthy = False
            if self._on_error is not None:
                self._on_error(exc)
            return False
        if not self._healthy:
            log.info("store reachable again; writing spooled records")
        self._healthy = True
        self.written += new
        return True

    async def replay_orphans(self) -> int:
        """Replay segments no live writer holds; returns how many records were read."""
        own = {s.path for s in self._closed}
        if self._current is not None:
            own.add(self._current.path)
        count = 0
        for path, fd in self.spool.orphans(own):
            try:
                records = Spool.read(path)
                if not await self._write_all(records):
                    return count
                count += len(records)
                path.unlink(missing_ok=True)
                log.info("replayed %d spooled records from %s", len(records), path.name)
            finally:
                os.close(fd)
        return count
