"""`RecordWriter`: spend and request-audit records, spooled at once, written in batches.

``submit`` (on the request path, in a stage's ``after``; it never raises) appends the record to
the current spool segment (a ``write``: it survives the process being killed; with ``fsync``
the segment is also synced to disk every flush interval, off the loop, so a lost host loses at
most that) and queues it. A background task hands what is queued to the writer's own thread
(`fleetgate.tenancy.records.RecordSink`), which writes it in batches with its own connection,
``INSERT ... ON CONFLICT DO NOTHING``: a flush costs the event loop one hand-off per segment,
not a turn per statement, so the writer keeps pace however busy the loop is.

What can go wrong, and what happens:

- the store is away: records wait and are written when it returns, in order. At most
  ``max_pending`` records wait in memory; beyond that a segment is file-backed (the spool holds
  its records, read back when its turn comes). Orphaned segments (a crash) are replayed at
  start and periodically;
- the store refuses a record for its data: the batch is bisected, the record set aside in the
  dead-letter file (`DeadLetters`), the rest written;
- the spool cannot be written (a full disk): the records wait in memory (at most
  ``max_pending`` more; beyond, the oldest are dropped and counted), the spool is retried every
  flush and, while it still fails, the records are written to the store from memory.

Replays are idempotent on the request id: a record written twice counts once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from fleetgate.store.database import Database
from fleetgate.tasks import Background
from fleetgate.tenancy.deadletters import DeadLetters
from fleetgate.tenancy.journal import Segment, Spool, encode
from fleetgate.tenancy.records import TABLES, Progress, RecordSink

__all__ = ["RecordWriter"]

log = logging.getLogger("fleetgate.tenancy.writer")

P = ParamSpec("P")
T = TypeVar("T")


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
        segment_max_records: int = 10_000,
        replay_interval_s: float = 5.0,
        max_pending: int = 20_000,
        fsync: bool = True,
        dead_letter_path: Path | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_refused: Callable[[int], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.db = db
        self.spool = Spool(spool_dir)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.segment_max_s = segment_max_s
        self.segment_max_records = segment_max_records
        self.replay_interval_s = replay_interval_s
        self.max_pending = max_pending
        self.fsync = fsync
        self.dead_letters = DeadLetters(
            dead_letter_path or spool_dir.parent / "spend-dead-letters.jsonl"
        )
        self._on_error = on_error
        self._on_refused = on_refused
        self._on_dropped = on_dropped
        self._sink = RecordSink(lambda: db.bulk_insert(TABLES), self.dead_letters)
        self._thread: ThreadPoolExecutor | None = None
        self._current: Segment | None = None
        self._closed: deque[Segment] = deque()  # full segments, oldest first
        self._held = 0  # records of segments held in memory
        self._unspooled: deque[dict[str, Any]] = deque()  # the spool failed: memory only
        self._in_flight = 0  # unspooled records being written right now
        self._spool_failing = False
        self._lock = asyncio.Lock()
        self._task = Background(self._run, name="record-writer")
        self._healthy = True
        self.written = 0  # spend records the database accepted as new
        self.refused = 0  # records set aside in the dead-letter file
        self.dropped = 0  # records lost: neither the spool nor memory could take them

    @property
    def healthy(self) -> bool:
        """False while the last write to the database failed."""
        return self._healthy

    def pending(self) -> int:
        """Records not yet in the store (in memory or only in the spool)."""
        segs = [*self._closed, *([self._current] if self._current else [])]
        return sum(s.remaining() for s in segs) + len(self._unspooled) + self._in_flight

    def held(self) -> int:
        """Records waiting in memory (bounded by about twice ``max_pending``)."""
        return self._held + len(self._unspooled) + self._in_flight

    # -- the request path ------------------------------------------------------------------

    def submit(self, kind: str, row: dict[str, Any]) -> None:
        """Spool and queue one record (``kind``: ``spend``, ``audit`` or ``safety``)."""
        self.submit_all([(kind, row)])

    def submit_all(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Spool (in one write) and queue several records. Never raises."""
        if not records:
            return
        entries, data = encode([{"kind": kind, "row": row} for kind, row in records])
        try:
            self._append(entries, data)
        except OSError as exc:
            self._hold_unspooled(entries, exc)

    def _append(self, entries: list[dict[str, Any]], data: bytes) -> None:
        cur = self._current
        # Hysteresis: once file-backed, back to memory only when half the room is free.
        room = self.max_pending if cur is None or cur.pending is not None else self.max_pending // 2
        keep = self._held + len(entries) <= room
        if cur is not None and (
            cur.broken
            or cur.appended >= self.segment_max_records
            or (cur.pending is not None) != keep
            or time.monotonic() - cur.opened > self.segment_max_s
        ):
            self._close_current()
            cur = None
        if cur is None:
            cur = self._current = self.spool.open_segment(in_memory=keep)
        cur.append(entries, data)
        if cur.pending is not None:
            self._held += len(entries)

    def _close_current(self) -> None:
        cur, self._current = self._current, None
        if cur is None:
            return
        if cur.appended == 0 or (cur.remaining() == 0 and not cur.broken):
            cur.close()  # nothing in it the store lacks
            cur.path.unlink(missing_ok=True)
        else:
            self._closed.append(cur)

    def _hold_unspooled(self, entries: list[dict[str, Any]], exc: OSError) -> None:
        if not self._spool_failing:
            log.error("spool write failed (%s): records wait in memory, retrying", exc)
            self._spool_failing = True
        dropped = 0
        for entry in entries:
            if len(self._unspooled) >= self.max_pending:
                self._unspooled.popleft()
                dropped += 1
            self._unspooled.append(entry)
        if dropped:
            self._dropped(dropped)

    def _dropped(self, count: int) -> None:
        self.dropped += count
        log.error("%d spend/audit records dropped: the spool and memory are full", count)
        if self._on_dropped is not None:
            self._on_dropped(count)

    # -- start, aclose, the background task ------------------------------------------------

    async def start(self) -> None:
        """Replay what a previous run left behind, then write in the background."""
        await self.replay_orphans()
        self._task.start()

    async def aclose(self) -> None:
        """Write everything still queued; what cannot be written stays spooled."""
        await self._task.aclose()
        self._close_current()
        await self.flush()
        self._close_current()  # one the flush opened to spool what waited in memory
        for seg in self._closed:
            if self.fsync and seg.fd >= 0:
                try:
                    seg.sync()
                except OSError as exc:
                    log.error("spool fsync failed at shutdown: %s", exc)
            seg.close()  # left on disk: replayed by the next start
        self._closed.clear()
        self._held = 0
        if self._unspooled:
            self._dropped(len(self._unspooled))  # neither spooled nor written: gone
            self._unspooled.clear()
        if self._thread is not None:
            await self._in_thread(self._sink.close)
            self._thread.shutdown(wait=False)
            self._thread = None

    async def _run(self) -> None:
        last_replay = time.monotonic()
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                if self.fsync:
                    await self._sync()
                await self.flush()
                if self._healthy and time.monotonic() - last_replay > self.replay_interval_s:
                    last_replay = time.monotonic()
                    await self.replay_orphans()
            except Exception:  # a bug must not stop every later write
                log.exception("record writer: flush failed")

    async def _sync(self) -> None:
        """fsync every segment with unsynced records, off the event loop: the spool survives a
        lost host too, up to one flush interval."""
        for seg in [*self._closed, *([self._current] if self._current else [])]:
            if seg.appended > seg.synced:
                try:
                    await asyncio.to_thread(seg.sync)
                except OSError as exc:
                    log.warning("spool fsync failed: %s", exc)

    async def _in_thread(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="fleetgate-records")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: fn(*args, **kwargs))

    # -- writing -------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write every record queued when it is called (stops at the first store error)."""
        async with self._lock:
            self._respool()
            for seg in list(self._closed):
                if not await self._drain(seg):
                    return
                self._finish(seg)
            if await self._drain_current():
                await self._drain_unspooled()

    async def _drain_current(self) -> bool:
        cur = self._current
        if cur is None or not cur.appended:
            return True
        young = time.monotonic() - cur.opened <= self.segment_max_s
        if cur.pending is not None and not cur.broken and young:
            return await self._drain(cur)  # in memory: it keeps taking records meanwhile
        self._close_current()  # file-backed: read back from its file, so no appends meanwhile
        if cur not in self._closed:
            return True  # nothing left in it: deleted
        if not await self._drain(cur):
            return False
        self._finish(cur)
        return True

    def _finish(self, seg: Segment) -> None:
        """A closed segment whose records are all in the store: delete it."""
        self._closed.remove(seg)
        seg.close()
        seg.path.unlink(missing_ok=True)

    async def _drain(self, seg: Segment) -> bool:
        if seg.pending is not None:
            # Only what was queued when the flush began: records keep arriving meanwhile.
            count = len(seg.pending)
            if count == 0:
                return True
            progress = await self._in_thread(self._sink.write, seg.pending[:count], self.batch_size)
            del seg.pending[: progress.handled]
            seg.done += progress.handled
            self._held -= progress.handled
            return self._account(progress)
        if seg.done >= seg.appended:
            return True
        progress, _ = await self._in_thread(
            self._sink.write_file, seg.path, seg.done, self.batch_size
        )
        # A torn line (a full disk mid-write) is not in the file: those records were kept in
        # memory as unspooled, so the segment is done once its file is.
        seg.done = seg.appended if progress.error is None else seg.done + progress.handled
        return self._account(progress)

    def _respool(self) -> None:
        """Move records the spool failed to take into it, now that it may have room."""
        if not self._unspooled:
            return
        entries, data = encode(list(self._unspooled))
        try:
            self._append(entries, data)
        except OSError:
            return
        self._unspooled.clear()
        self._spool_failing = False
        log.warning("spool writable again: records that waited in memory are spooled")

    async def _drain_unspooled(self) -> None:
        """While the spool still fails, write what waits in memory straight to the store."""
        if not self._unspooled:
            return
        records = list(self._unspooled)
        self._unspooled.clear()
        self._in_flight = len(records)
        handled = 0
        try:
            progress = await self._in_thread(self._sink.write, records, self.batch_size)
            handled = progress.handled
            self._account(progress)
        finally:
            self._in_flight = 0
            rest = records[handled:]
            self._unspooled.extendleft(reversed(rest))
            over = len(self._unspooled) - self.max_pending
            for _ in range(max(0, over)):
                self._unspooled.popleft()
            if over > 0:
                self._dropped(over)

    def _account(self, progress: Progress) -> bool:
        self.written += progress.new
        if progress.refused:
            self.refused += progress.refused
            log.error(
                "%d spend/audit records refused by the store, set aside in %s",
                progress.refused, self.dead_letters.path,
            )  # fmt: skip
            if self._on_refused is not None:
                self._on_refused(progress.refused)
        if progress.error is not None:
            if self._healthy:
                log.warning("spend/audit write failed, records stay spooled: %s", progress.error)
            self._healthy = False
            if self._on_error is not None:
                self._on_error(progress.error)
            return False
        if not self._healthy:
            log.info("store reachable again; writing spooled records")
        self._healthy = True
        return True

    async def replay_orphans(self) -> int:
        """Replay segments no live writer holds; returns how many records were read."""
        async with self._lock:
            own = {s.path for s in self._closed}
            if self._current is not None:
                own.add(self._current.path)
            count = 0
            for path, fd in self.spool.orphans(own):
                try:
                    progress, total = await self._in_thread(
                        self._sink.write_file, path, 0, self.batch_size
                    )
                    if not self._account(progress):
                        return count
                    count += total
                    path.unlink(missing_ok=True)
                    log.info("replayed %d spooled records from %s", total, path.name)
                finally:
                    os.close(fd)
            return count
