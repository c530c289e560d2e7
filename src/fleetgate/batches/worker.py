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

A line fails alone, never the batch or its lease: one that cannot be read is an error entry
(the same limits as a request body, `fleetgate.batches.lines`); one not answered within
``line_timeout_s`` is ``line_timeout``; one whose result the store refuses (not: cannot reach)
is recorded without what was refused; one sent ``max_line_attempts`` times without its result
ever being recorded (each replica driving it died or stalled) is ``line_abandoned``, never sent
again. When the credential that created the batch expires or is revoked (a line answered 401),
the batch stops: its remaining lines fail with that error and it ends ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleetgate.batches.config import BatchesConfig
from fleetgate.batches.grant import Grant
from fleetgate.batches.lines import BatchLine, error_record, output_record, read_lines
from fleetgate.batches.store import BatchStore
from fleetgate.errors import NotFound
from fleetgate.store.errors import is_unreachable
from fleetgate.tasks import Background, RunsInBackground, cancel_and_wait

__all__ = ["BatchRun", "BatchWorker", "LineRequest", "LineSender"]

log = logging.getLogger("fleetgate.batches")

_RETRY_STATUSES = frozenset({429, 503})
_RETRIES = 4
_MAX_LINE_BYTES = 16 * 1024 * 1024  # server.max_request_bytes' default


@dataclass(frozen=True)
class LineRequest:
    """One send of a line: as the batch's key (narrowed by its ``grant``, when stored), to its
    endpoint, under the line's own request id."""

    key_id: str
    endpoint: str
    body: dict[str, Any]
    request_id: str
    grant: Grant | None = None


class LineSender(Protocol):
    """How a line is sent (`fleetgate.batches.execute.GatewaySender` in the gateway)."""

    def idle(self, alias: str) -> bool: ...

    async def send(self, line: LineRequest) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of one line; refusals and failures as OpenAI error bodies."""
        ...


class BatchWorker(RunsInBackground):
    def __init__(
        self,
        store: BatchStore,
        config: Callable[[], BatchesConfig],
        sender: LineSender,
        *,
        owner: str,
        prepare: Callable[[], Awaitable[None]],
        max_line_bytes: Callable[[], int] = lambda: _MAX_LINE_BYTES,
    ) -> None:
        self.store = store
        self.config = config
        self.sender = sender
        self.owner = owner  # this replica, in the lease
        self.max_line_bytes = max_line_bytes  # a line's body, as server.max_request_bytes
        self._prepare = prepare  # the store migrated
        self._task = Background(self._loop, name="batches")
        self._nudged = asyncio.Event()
        self.driving: dict[str, asyncio.Task[None]] = {}
        self._runs: dict[str, BatchRun] = {}

    async def aclose(self) -> None:
        """Stop driving; leases are given up so another replica resumes at once (idempotent,
        safe without start)."""
        await super().aclose()
        running, self.driving = self.driving, {}
        runs, self._runs = self._runs, {}
        await cancel_and_wait(*running.values())
        for batch_id in running:
            try:
                if batch_id in runs:  # a clean stop: its lines in flight did not fail
                    await runs[batch_id].uncount()
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
                run.max_line_bytes = self.max_line_bytes()
                task = asyncio.get_running_loop().create_task(self._drive(run))
                self.driving[batch_id] = task
                self._runs[batch_id] = run

    async def _drive(self, run: BatchRun) -> None:
        try:
            await run.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # the lease runs out; a later tick (here or elsewhere) resumes it
            log.exception("batch %s stopped", run.batch_id)
        finally:
            self.driving.pop(run.batch_id, None)
            self._runs.pop(run.batch_id, None)


@dataclass(eq=False, repr=False)
class BatchRun:
    """One replica driving one batch while it holds the lease."""

    store: BatchStore
    config: BatchesConfig
    sender: LineSender
    owner: str
    batch_id: str
    max_line_bytes: int = field(default=_MAX_LINE_BYTES, init=False)
    row: dict[str, Any] = field(default_factory=dict, init=False)
    grant: Grant | None = field(default=None, init=False)
    # why sending stopped: cancelling, expired, lease, store, credentials
    stop: str | None = field(default=None, init=False)
    # the credentials' error, when they stopped it
    refusal: dict[str, Any] = field(default_factory=dict, init=False)
    # sends of each line not yet recorded
    attempts: dict[int, int] = field(default_factory=dict, init=False)
    # lines sent by this run and not yet recorded
    _sent_here: set[int] = field(default_factory=set, init=False)

    async def run(self) -> None:
        self.row = row = await self.store.batch(self.batch_id, None)
        try:
            content = await self.store.content(row["input_file_id"], row["owner"])
        except NotFound:
            await self.store.finish(self.batch_id, self.owner, "failed", [])
            return
        self.grant = Grant.from_json(row.get("principal"))
        lines = await asyncio.to_thread(read_lines, content, row["endpoint"], self.max_line_bytes)
        done = await self.store.done_lines(self.batch_id)
        self.attempts = {
            int(line): int(n)
            for line, n in (row.get("line_attempts") or {}).items()
            if int(line) not in done
        }
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
            extra = await self._unsent(lines, "batch_expired", "The batch expired first.")
            await self.store.finish(self.batch_id, self.owner, "expired", extra)
            return
        if self.stop == "credentials":
            code = str(self.refusal.get("code") or "invalid_api_key")
            message = str(self.refusal.get("message") or "The batch's credentials are gone.")
            extra = await self._unsent(lines, code, message)
            error = {"code": code, "message": message, "param": None, "line": None}
            await self.store.finish(self.batch_id, self.owner, "failed", extra, [error])
            return
        await self.store.finish(self.batch_id, self.owner, "completed", [])

    async def _unsent(self, lines: list[BatchLine], code: str, message: str) -> list[str]:
        """Error entries for the lines that have no result."""
        done = await self.store.done_lines(self.batch_id)
        return [
            error_record(self.batch_id, line, code, message)
            for line in lines
            if line.line not in done
        ]

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
                        line, False, error_record(self.batch_id, line, line.code, message)
                    )
                    continue
                if await self._abandoned(line):
                    continue
                await gate.acquire()
                alias = line.body.get("model")
                while self.stop is None and isinstance(alias, str) and not self.sender.idle(alias):
                    await asyncio.sleep(self.config.idle_wait_s)
                if self.stop is None and self.grant is not None:
                    self._check_grant()  # just before sending: a wait may have outlived it
                if self.stop is not None or not await self._attempt(line):
                    gate.release()
                    break
                task = loop.create_task(self._line(line, gate))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running)
        finally:
            await cancel_and_wait(*running)

    def _check_grant(self) -> None:
        assert self.grant is not None
        if self.grant.expired(self.store.clock()):
            self.stop = "credentials"
            self.refusal = {
                "code": "expired_api_key",
                "message": "The token that created this batch has expired.",
            }

    async def _abandoned(self, line: BatchLine) -> bool:
        """Record the line as failed, unsent, when it was sent too often without a result."""
        sent = self.attempts.get(line.line, 0)
        if sent < self.config.max_line_attempts:
            return False
        log.warning("batch %s line %d abandoned after %d sends", self.batch_id, line.line, sent)
        message = (
            f"The line was sent {sent} times and no result was ever recorded (the replica "
            "driving it stopped or stalled each time); it is not sent again."
        )
        await self._record(
            line, False, error_record(self.batch_id, line, "line_abandoned", message)
        )
        return True

    async def _attempt(self, line: BatchLine) -> bool:
        """Count a send of ``line`` in the store before it is made; False (and stop) when the
        count cannot be written."""
        self.attempts[line.line] = self.attempts.get(line.line, 0) + 1
        self._sent_here.add(line.line)
        try:
            await self.store.note_attempts(self.batch_id, self.owner, self.attempts)
        except Exception as exc:  # not sent uncounted: resumed later
            log.warning("batch %s: attempts not written: %s", self.batch_id, exc)
            self.stop = "store"
            return False
        return True

    async def uncount(self) -> None:
        """Take back the sends of the lines in flight (this replica stopping cleanly: they
        were interrupted, they did not take it down)."""
        for number in self._sent_here:
            left = self.attempts.get(number, 0) - 1
            if left > 0:
                self.attempts[number] = left
            else:
                self.attempts.pop(number, None)
        self._sent_here.clear()
        await self.store.note_attempts(self.batch_id, self.owner, self.attempts)

    async def _line(self, line: BatchLine, gate: asyncio.Semaphore) -> None:
        try:
            assert line.body is not None
            request_id = f"{self.batch_id}-{line.line}"
            try:
                async with asyncio.timeout(self.config.line_timeout_s):
                    status, body = await self._send(line.body, request_id)
            except TimeoutError:
                message = f"The line was not answered within {self.config.line_timeout_s:g} s."
                await self._record(
                    line, False, error_record(self.batch_id, line, "line_timeout", message)
                )
                return
            except Exception as exc:  # a fault of ours: the line fails, the batch goes on
                log.exception("batch %s line %d failed", self.batch_id, line.line)
                record = error_record(self.batch_id, line, "internal_error", str(exc)[:500])
                await self._record(line, False, record)
                return
            error = body.get("error")
            if status == 401 and isinstance(error, dict) and self.stop is None:
                self.stop = "credentials"  # revoked or expired: the rest would be refused too
                self.refusal = error
            record = output_record(self.batch_id, line, status, request_id, body)
            await self._record(line, status < 400, record)
        finally:
            gate.release()

    async def _send(self, body: dict[str, Any], request_id: str) -> tuple[int, dict[str, Any]]:
        row = self.row
        for attempt in range(_RETRIES + 1):
            line = LineRequest(row["key_id"], row["endpoint"], body, request_id, self.grant)
            status, answer = await self.sender.send(line)
            if status not in _RETRY_STATUSES or attempt == _RETRIES or self.stop is not None:
                break
            await asyncio.sleep(min(8.0, 0.5 * 2**attempt))
        return status, answer

    async def _record(self, line: BatchLine, ok: bool, record: str) -> None:
        try:
            await self.store.record(self.batch_id, line.line, line.custom_id, ok, record)
        except Exception as exc:
            if is_unreachable(exc):  # not done: resumed later, never counted without its row
                log.warning(
                    "batch %s line %d: result not written: %s", self.batch_id, line.line, exc
                )
                self.stop = "store"
                return
            # The store refused this row's data: it would refuse it on every resume, so the
            # line is recorded, once, without what was refused.
            log.warning("batch %s line %d: result refused: %s", self.batch_id, line.line, exc)
            await self._record_refused(line)
        else:
            self._recorded(line)

    def _recorded(self, line: BatchLine) -> None:
        self.attempts.pop(line.line, None)
        self._sent_here.discard(line.line)

    async def _record_refused(self, line: BatchLine) -> None:
        bare = BatchLine(line.line, None, None)
        message = "The line's result could not be stored."
        try:
            await self.store.record(
                self.batch_id, line.line, None, False,
                error_record(self.batch_id, bare, "result_not_stored", message),
            )  # fmt: skip
        except Exception as exc:
            log.warning("batch %s line %d: result not written: %s", self.batch_id, line.line, exc)
            self.stop = "store"
        else:
            self._recorded(line)
