"""Asynchronous audit: whole exchanges go through a bounded queue to a guard model.

The request path calls :meth:`AuditQueue.submit` (never blocks: a full queue sheds and counts);
worker tasks run the audit checks (typically :class:`~fleetgate.safety.checks.llama_guard.
LlamaGuardCheck`) on the last turn in its context, then:

- hand an :class:`AuditRecord` to the ``sink`` (the lead's audit log),
- count results, violations by category and failures in Prometheus,
- POST a JSON alert to ``webhook_url`` for each violation,
- call ``on_suspend(key_id)`` once a key reaches ``suspend_after`` violations (counted by
  ``strikes``, a `fleetgate.safety.strikes.StrikeCounter` shared by every replica, when given;
  in this process otherwise, and while the database is away).

A guard endpoint that is down yields counted failures (result ``error``), never an exception.

Example::

    audit = AuditQueue([guard], metrics=metrics, sink=audit_log.write, suspend_after=5,
                       on_suspend=keys.suspend, webhook_url="https://alerts.example/hook",
                       http=resources.http)
    await audit.start()
    audit.submit(AuditItem(messages=[TextTurn("user", q), TextTurn("assistant", a)], key_id="k1"))
    ...
    await audit.aclose()
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.base import (
    Check,
    CheckContext,
    CheckPoint,
    TextTurn,
    Verdict,
    flagged_categories,
)
from fleetgate.safety.metrics import SafetyMetrics
from fleetgate.safety.strikes import StrikeCounter

__all__ = ["AuditItem", "AuditQueue", "AuditRecord"]

log = logging.getLogger("fleetgate.safety.audit")


@dataclass(frozen=True, slots=True)
class AuditItem:
    """One finished exchange; the last message is the one judged, the rest is its context."""

    messages: Sequence[TextTurn]
    key_id: str | None = None
    team: str | None = None
    alias: str | None = None
    request_id: str | None = None
    created_at: float = field(default_factory=time.time)
    checks: Sequence[Check] | None = None
    """The checks to run (a policy's audit checks); None: the queue's own."""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """The audit verdicts for one exchange, as handed to the sink."""

    item: AuditItem
    verdicts: tuple[Verdict, ...]

    @property
    def flagged(self) -> bool:
        return any(v.flagged for v in self.verdicts)

    @property
    def failed(self) -> bool:
        """Every audit check failed to decide."""
        return bool(self.verdicts) and all(v.error for v in self.verdicts)

    @property
    def categories(self) -> list[str]:
        return flagged_categories(self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.item.request_id,
            "key_id": self.item.key_id,
            "team": self.item.team,
            "alias": self.item.alias,
            "created_at": self.item.created_at,
            "flagged": self.flagged,
            "categories": self.categories,
            "verdicts": [v.to_dict() for v in self.verdicts],
        }  # fmt: skip


Hook = Callable[..., Awaitable[None] | None]


async def _call(fn: Hook | None, *args: Any) -> None:
    if fn is None:
        return
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


class AuditQueue:
    """A bounded queue and worker tasks auditing exchanges off the request path."""

    def __init__(
        self,
        checks: Sequence[Check],
        *,
        metrics: SafetyMetrics | None = None,
        sink: Hook | None = None,
        webhook_url: str | None = None,
        webhook_timeout_s: float = 5.0,
        suspend_after: int | None = None,
        on_suspend: Hook | None = None,
        queue_size: int = 1000,
        workers: int = 2,
        http: OutboundHttp,
        strikes: StrikeCounter | None = None,
    ) -> None:
        """``http``: the process's outbound session for the webhook (the owner closes it);
        ``strikes``: the shared violation counts (else counted in this process)."""
        self._checks = list(checks)
        self._metrics = metrics
        self._sink = sink
        self._webhook_url = webhook_url
        self._webhook_timeout = aiohttp.ClientTimeout(total=webhook_timeout_s)
        self._suspend_after = suspend_after
        self._on_suspend = on_suspend
        self._queue: asyncio.Queue[AuditItem] = asyncio.Queue(maxsize=queue_size)
        self._n_workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._http = http
        self._strikes = strikes
        self._violations: dict[str, int] = {}
        self.suspended: set[str] = set()
        self.shed = 0
        self.failures = 0
        if metrics is not None:
            metrics.audit_queue_depth.set_collector(lambda: [((), float(self._queue.qsize()))])

    async def start(self) -> None:
        """Start the worker tasks (inside the running loop)."""
        for i in range(self._n_workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"fg-audit-{i}"))

    def submit(self, item: AuditItem) -> bool:
        """Queue an exchange; False (and counted) when the queue is full. Never blocks."""
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.shed += 1
            if self._metrics is not None:
                self._metrics.audit_shed.inc()
            return False
        return True

    async def join(self) -> None:
        """Wait until everything queued so far has been audited."""
        await self._queue.join()

    async def aclose(self, *, drain_timeout_s: float = 5.0) -> None:
        """Let the queue drain (bounded by ``drain_timeout_s``), then stop the workers."""
        if self._tasks:
            try:
                await asyncio.wait_for(self._queue.join(), drain_timeout_s)
            except TimeoutError:
                log.warning("audit queue not drained; %d items dropped", self._queue.qsize())
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _worker(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._audit(item)
            except Exception:  # one bad item (sink bug, ...) must not kill the worker
                log.exception("audit of %s failed", item.request_id)
            finally:
                self._queue.task_done()

    async def _audit(self, item: AuditItem) -> None:
        if not item.messages:
            return
        last = item.messages[-1]
        ctx = CheckContext(
            stage=CheckPoint.AUDIT, role=last.role, history=tuple(item.messages[:-1]),
            alias=item.alias, team=item.team, key_id=item.key_id, request_id=item.request_id,
        )  # fmt: skip
        verdicts: list[Verdict] = []
        for check in item.checks if item.checks is not None else self._checks:
            try:
                verdict = await check.check(last.content, ctx)
            except Exception as exc:
                verdict = Verdict.failed(check.name, f"check raised {exc!r}"[:300])
            verdicts.append(verdict)
            if self._metrics is not None:
                self._metrics.record(CheckPoint.AUDIT, verdict)
        record = AuditRecord(item, tuple(verdicts))
        self._count(record)
        await _call(self._sink, record)
        if record.flagged:
            await self._alert(record)
            await self._maybe_suspend(item.key_id)

    def _count(self, record: AuditRecord) -> None:
        result = "unsafe" if record.flagged else "error" if record.failed else "safe"
        if result == "error":
            self.failures += 1
        if self._metrics is None:
            return
        self._metrics.audit.labels(result).inc()
        for category in record.categories:
            self._metrics.audit_violations.labels(category).inc()

    async def _alert(self, record: AuditRecord) -> None:
        if self._webhook_url is None:
            return
        try:
            async with self._http.session().post(
                self._webhook_url, json={"event": "safety_violation", **record.to_dict()},
                timeout=self._webhook_timeout,
            ) as resp:  # fmt: skip
                status = resp.status
            outcome = "sent" if status < 400 else "failed"
            if status >= 400:
                log.warning("safety alert webhook answered HTTP %d", status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            # The type only: the webhook URL (its path is often the secret, as in Slack's) and
            # the request headers are in aiohttp's error text.
            log.warning("safety alert webhook failed: %s", type(exc).__name__)
            outcome = "failed"
        if self._metrics is not None:
            self._metrics.alerts.labels(outcome).inc()

    async def _maybe_suspend(self, key_id: str | None) -> None:
        if key_id is None or self._suspend_after is None or key_id in self.suspended:
            return
        count = await self._strike(key_id)
        if count >= self._suspend_after:
            self.suspended.add(key_id)
            if self._metrics is not None:
                self._metrics.suspensions.inc()
            await _call(self._on_suspend, key_id)

    async def _strike(self, key_id: str) -> int:
        """Count one violation; the shared count when there is one (this process's meanwhile)."""
        local = self._violations[key_id] = self._violations.get(key_id, 0) + 1
        if self._strikes is None:
            return local
        try:
            return max(local, await self._strikes.add(key_id))
        except Exception as exc:  # the database is away: at least this process's count
            log.warning("could not count a safety strike in the database: %s", exc)
            return local
