"""Budget alerts: one webhook POST per scope, period and threshold, ever.

A crossing is detected where the spend counter is incremented (atomically, so exactly one
replica sees it); the alert is then claimed in the store (``INSERT ... ON CONFLICT DO
NOTHING`` on scope, period and threshold) so a restart or a second detector never resends.
The webhook goes out through the process's shared side-service session (`OutboundHttp`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import asdict, dataclass

import aiohttp

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.store.database import Database
from fleetgate.tasks import Background, RunsInBackground
from fleetgate.tenancy.tables import budget_alerts

__all__ = ["BudgetAlert", "AlertNotifier"]

log = logging.getLogger("fleetgate.tenancy.alerts")


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    """What the webhook receives (as JSON)."""

    scope: str  # "key" | "team"
    scope_id: str
    name: str
    threshold_pct: int
    spend_usd: float
    budget_usd: float
    period_start_ms: int


class AlertNotifier(RunsInBackground):
    """Claims and sends alerts in the background; ``notify`` never blocks."""

    def __init__(
        self,
        db: Database,
        webhook: str | None,
        *,
        attempts: int = 5,
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        self.db = db
        self.webhook = webhook
        self.attempts = attempts
        self._http = http
        self._timeout = aiohttp.ClientTimeout(total=5)
        self._queue: asyncio.Queue[BudgetAlert] = asyncio.Queue(maxsize=10_000)
        self._task = Background(self._run, name="budget-alerts")
        self._started = False  # what is queued is sent before aclose stops the task
        self.sent: list[BudgetAlert] = []

    def notify(self, alert: BudgetAlert) -> None:
        try:
            self._queue.put_nowait(alert)
        except asyncio.QueueFull:
            log.error("alert queue full; dropping %s", alert)

    async def start(self) -> None:
        self._started = True
        await super().start()

    async def aclose(self) -> None:
        if self._started:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await self._queue.join()
            self._started = False
            await super().aclose()

    async def _run(self) -> None:
        while True:
            alert = await self._queue.get()
            try:
                await self._handle(alert)
            except Exception as exc:
                log.error("budget alert failed: %s", exc)
            finally:
                self._queue.task_done()

    async def _claim(self, alert: BudgetAlert) -> bool:
        for attempt in range(self.attempts):
            try:
                row = {
                    "scope": alert.scope,
                    "scope_id": alert.scope_id,
                    "period_start_ms": alert.period_start_ms,
                    "threshold": alert.threshold_pct,
                    "sent_ms": int(time.time() * 1000),
                }
                return await self.db.insert_ignore(budget_alerts, [row]) == 1
            except Exception as exc:
                log.warning("could not record a budget alert (%s); retrying", exc)
                await asyncio.sleep(min(2**attempt, 10))
        return False

    async def _handle(self, alert: BudgetAlert) -> None:
        if not await self._claim(alert):
            return
        log.warning(
            "budget alert: %s %s reached %d%% (%.6f of %.2f USD)",
            alert.scope, alert.name, alert.threshold_pct, alert.spend_usd, alert.budget_usd,
        )  # fmt: skip
        self.sent.append(alert)
        if not self.webhook:
            return
        for attempt in range(self.attempts):
            try:
                async with self._http.session().post(
                    self.webhook, json=asdict(alert), timeout=self._timeout
                ) as resp:
                    if resp.status < 500:
                        return
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("alert webhook failed (%s); retrying", exc)
            await asyncio.sleep(min(0.5 * 2**attempt, 5))
