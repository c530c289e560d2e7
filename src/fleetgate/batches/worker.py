"""`BatchWorker`: drives batches to completion, one replica per batch, on idle capacity only.

Every replica runs the loop. Each tick it lists the batches that need a driver and whose lease
is free or expired, takes the lease of each it can (`BatchStore.lease`, a conditional update:
one replica wins) and drives it in a task of its own (`BatchRun`), renewing the lease every
third of ``lease_s``. A replica that dies stops renewing; another takes over after
``lease_s`` and resumes from the result rows: a line counts as done only once its row is
written, so no line is lost, and a line sent but not yet recorded when the replica died is
sent again and recorded once (its request id is the same, so it is billed once).

A line is sent only while the alias's pool is idle (`LineSender.idle`), at most
``concurrency`` at a time per batch. A 429 or 503 answer (limits, shedding) is retried a few
times with a growing pause before it is recorded as the line's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fleetgate.batches.config import BatchesConfig
from fleetgate.batches.lines import BatchLine, error_record, output_record, read_lines
from fleetgate.batches.store import BatchStore
from fleetgate.errors import NotFound
from fleetgate.tasks import cancel_and_wait

__all__ = ["BatchRun", "BatchWorker", "LineSender"]

log = logging.getLogger("fleetgate.batches")

_RETRY_STATUSES = frozenset({429, 503})
_RETRIES = 4


class LineSender(Protocol):
    """How a line is sent (`fleetgate.batches.execute.GatewaySender` in the gateway)."""

    def idle(self, alias: str) -> bool: ...

    async def send(
        self, key_id: str, endpoint: str, body: dict[str, Any], request_id: str
    ) -> tuple[int, dict[str, Any]]: ...


class BatchWorker:
    def __init__(
        self,
        store: BatchStore,
        config: Callable[[], BatchesConfig],
        sender: LineSender,
        *,
        owner: str,
        prepare: Callable[[], Awaitable[None]],
    ) -> None:
        self.store = store
        self.config = config
        self.sender = sender
        self.owner = owner  # this replica, in the lease
        self._prepare = prepare  # the store migrated
        self._task: asyncio.Task[None] | None = None
        self._nudged = asyncio.Event()
        self.driving: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Start the loop (inside the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="batches")

    async def aclose(self) -> None:
        """Stop driving; leases are given up so another replica resumes at once (idempotent,
        safe without start)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        running, self.driving = self.driving, {}
        await cancel_and_wait(*running.values())
        for batch_id in running:
            try:
                await self.store.release(batch_id, self.owner)
            except Exception as exc:  # the lease expires by itself
                log.warning("could not give up the lease of %s: %s", batch_id, exc)

    async def _loop(self) -> None:
        while True:
            try:
                await self._prepare()
                await self.tick()
            except Exception as exc:  # the store may be away: try again next tick
                log.warning("batch tick failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config().tick_s):
                    await self._nudged.wait()
            self._nudged.clear()

    def nudge(self) -> None:
        """Look for batches now rather than at the next tick (this replica created or
        cancelled one): a new batch starts at once however long ``tick_s`` is."""
        self._nudged.set()

    async def tick(self) -> None:
        """Take the lease of every batch that needs a driver and start driving it."""
        cfg = self.config()
        for batch_id in await self.store.runnable():
            if batch_id in self.driving:
                continue
            if await self.store.lease(batch_id, self.owner, cfg.lease_s):
                run = BatchRun(self.store, cfg, self.sender, self.owner, batch_id)
                task = asyncio.get_running_loop().create_task(self._drive(run))
                self.driving[batch_id] = task

    async def _drive(self, run: BatchRun) -> None:
        try:
            await run.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # the lease runs out; a later tick (here or elsewhere) resumes it
            log.exception("batch %s stopped", run.batch_id)
        finally:
            self.driving.pop(run.batch_id, None)


class BatchRun:
    """One replica driving one batch while it holds the lease."""

    def __init__(
        self,
        store: BatchStore,
        config: BatchesConfig,
        sender: LineSender,
        owner: str,
        batch_id: str,
    ) -> None:
        self.store = store
        self.config = config
        self.sender = sender
        self.owner = owner
        self.batch_id = batch_id
        self.row: dict[str, Any] = {}
        self.stop: str | None = None  # why sending stopped: cancelling, expired, lease, store

    async def run(self) -> None:
        self.row = row = await self.store.batch(self.batch_id, None)
        try:
            content = await self.store.content(row["input_file_id"], row["owner"])
        except NotFound:
            await self.store.finish(self.batch_id, self.owner, "failed", [])
            return
        lines = read_lines(content, row["endpoint"])
        done = await self.store.done_lines(self.batch_id)
        self.stop = "cancelling" if row["status"] == "cancelling" else None
        keeper = asyncio.get_running_loop().create_task(self._keep())
        try:
            await self._send_all([line for line in lines if line.line not in done])
        finally:
            await cancel_and_wait(keeper)
        await self._finish(lines)

    async def _finish(self, lines: list[BatchLine]) -> None:
        if self.stop in ("lease", "store"):
            return  # another replica (or a later tick) resumes it
        if self.stop == "cancelling":
            await self.store.finish(self.batch_id, self.owner, "cancelled", [])
            return
        if self.stop == "expired":
            done = await self.store.done_lines(self.batch_id)
            extra = [
                error_record(self.batch_id, line, "batch_expired", "The batch expired first.")
                for line in lines
                if line.line not in done
            ]
            await self.store.finish(self.batch_id, self.owner, "expired", extra)
            return
        await self.store.finish(self.batch_id, self.owner, "completed", [])

    async def _keep(self) -> None:
        """Renew the lease; notice a cancel, an expiry, or the lease lost."""
        while True:
            await asyncio.sleep(self.config.lease_s / 3)
            try:
                if not await self.store.lease(self.batch_id, self.owner, self.config.lease_s):
                    self.stop = "lease"
                    return
                row = await self.store.batch(self.batch_id, None)
            except Exception as exc:  # keep trying until the lease would have run out
                log.warning("batch %s: lease renewal failed: %s", self.batch_id, exc)
                continue
            if row["status"] == "cancelling":
                self.stop = "cancelling"
            elif self.store.clock() >= row["expires_ms"]:
                self.stop = self.stop or "expired"

    async def _send_all(self, pending: list[BatchLine]) -> None:
        gate = asyncio.Semaphore(self.config.concurrency)
        running: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        try:
            for line in pending:
                if self.stop is not None:
                    break
                if line.body is None:  # cannot be sent: its error is its result
                    message = line.error or "invalid line"
                    await self._record(
                        line, False, error_record(self.batch_id, line, "invalid_request", message)
                    )
                    continue
                await gate.acquire()
                alias = line.body.get("model")
                while self.stop is None and isinstance(alias, str) and not self.sender.idle(alias):
                    await asyncio.sleep(self.config.idle_wait_s)
                if self.stop is not None:
                    gate.release()
                    break
                task = loop.create_task(self._line(line, gate))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running)
        finally:
            await cancel_and_wait(*running)

    async def _line(self, line: BatchLine, gate: asyncio.Semaphore) -> None:
        try:
            assert line.body is not None
            request_id = f"{self.batch_id}-{line.line}"
            try:
                status, body = await self._send(line.body, request_id)
            except Exception as exc:  # a fault of ours: the line fails, the batch goes on
                log.exception("batch %s line %d failed", self.batch_id, line.line)
                record = error_record(self.batch_id, line, "internal_error", str(exc)[:500])
                await self._record(line, False, record)
                return
            record = output_record(self.batch_id, line, status, request_id, body)
            await self._record(line, status < 400, record)
        finally:
            gate.release()

    async def _send(self, body: dict[str, Any], request_id: str) -> tuple[int, dict[str, Any]]:
        row = self.row
        for attempt in range(_RETRIES + 1):
            status, answer = await self.sender.send(
                row["key_id"], row["endpoint"], body, request_id
            )
            if status not in _RETRY_STATUSES or attempt == _RETRIES or self.stop is not None:
                break
            await asyncio.sleep(min(8.0, 0.5 * 2**attempt))
        return status, answer

    async def _record(self, line: BatchLine, ok: bool, record: str) -> None:
        try:
            await self.store.record(self.batch_id, line.line, line.custom_id, ok, record)
        except Exception as exc:  # not done: resumed later, never counted without its row
            log.warning("batch %s line %d: result not written: %s", self.batch_id, line.line, exc)
            self.stop = "store"
