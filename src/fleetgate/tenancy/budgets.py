"""Budgets: spend counters seeded from the store, threshold alerts, remaining-budget gauges.

Enforcement itself is in the limiter (a scope with a budget refuses once its counter reaches
it); this module keeps the counters honest across restarts and reports on them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from sqlalchemy import func, select

from fleetgate.limits.base import Limiter, Scope
from fleetgate.store.database import Database
from fleetgate.tasks import RunsInBackground, periodic
from fleetgate.telemetry.registry import Registry
from fleetgate.tenancy.alerts import AlertNotifier, BudgetAlert
from fleetgate.tenancy.cache import KeyCache, Snapshot
from fleetgate.tenancy.money import nusd_to_usd
from fleetgate.tenancy.scopes import scope_for
from fleetgate.tenancy.tables import spend

__all__ = ["Budgets"]

log = logging.getLogger("fleetgate.tenancy.budgets")


class Budgets(RunsInBackground):
    """Seeds counters, detects threshold crossings, exports remaining budget per team."""

    def __init__(
        self,
        db: Database,
        limiter: Limiter,
        cache: KeyCache,
        alerts: AlertNotifier | None = None,
        thresholds: Sequence[int] = (50, 80, 100),
        registry: Registry | None = None,
        refresh_s: float = 5.0,
    ) -> None:
        self.db = db
        self.limiter = limiter
        self.cache = cache
        self.alerts = alerts
        self.thresholds = tuple(sorted(thresholds))
        self.refresh_s = refresh_s
        self._seeded: set[str] = set()
        self._generation: int | None = None  # the limiter generation last seeded against
        self._spent: dict[str, int] = {}  # budget_key -> nano-USD, as last seen
        self._task = periodic(
            lambda: self.refresh_s,
            self._refresh,
            log,
            "budget refresh failed",
            level=logging.DEBUG,
            name="budget-refresh",
        )
        if registry is not None:
            gauge = registry.gauge(
                "fleetgate_team_budget_remaining_usd",
                "Budget left this period per team (USD).",
                ("team",),
            )
            gauge.set_collector(self._remaining)

    def _budget_scopes(self, snap: Snapshot) -> Iterable[tuple[str, str, str, Scope]]:
        now = int(time.time() * 1000)
        for team in snap.teams.values():
            if team.limits.budget_nusd is not None:
                s = scope_for(f"team:{team.id}", team.limits, now)
                if s is not None:
                    yield "team", team.id, team.name, s
        for key in snap.by_id.values():
            if key.limits.budget_nusd is not None:
                s = scope_for(f"key:{key.id}", key.limits, now)
                if s is not None:
                    yield "key", key.id, key.id, s

    def _remaining(self) -> Iterable[tuple[tuple[str, ...], float]]:
        for kind, _, name, s in self._budget_scopes(self.cache.snapshot):
            if kind == "team" and s.budget_nusd is not None:
                left = s.budget_nusd - self._spent.get(s.budget_key, 0)
                yield (name,), nusd_to_usd(left)

    async def seed(self) -> None:
        """Raise each budgeted scope's counter to the store's total for its period: once per
        scope and period, and for every scope again whenever the limiter's generation moved
        (an outage or a reconnection: its counters may have missed spend, or been lost with a
        restarted Redis). A scope that cannot be seeded now is tried at the next refresh."""
        generation = self.limiter.generation()
        if generation != self._generation:
            self._seeded.clear()
        failed = False
        for kind, scope_id, _, s in list(self._budget_scopes(self.cache.snapshot)):
            if s.budget_key in self._seeded:
                continue
            column = spend.c.team_id if kind == "team" else spend.c.key_id
            query = select(func.coalesce(func.sum(spend.c.cost_nusd), 0)).where(
                column == scope_id, spend.c.created_ms >= s.period_start_ms
            )
            try:
                async with self.db.engine.connect() as conn:
                    total = int(await conn.scalar(query) or 0)
                await self.limiter.raise_spend(s, total)
                current = await self.limiter.spent(s)
            except Exception as exc:  # store or limiter away: keep serving, retry later
                if not failed:
                    log.warning("budget counters not seeded yet: %s", exc)
                failed = True
                continue
            self._seeded.add(s.budget_key)
            now = total if current is None else current
            # Thresholds crossed by spend the counter missed (the store drops repeats).
            self._alert(s, self._spent.get(s.budget_key, 0), now)
            self._spent[s.budget_key] = now
        if not failed:
            self._generation = generation

    def _forget_ended(self) -> None:
        """Drop what is remembered of periods that ended and of scopes no longer budgeted (one
        entry per budgeted scope and period would otherwise pile up over a long uptime)."""
        current = {s.budget_key for _, _, _, s in self._budget_scopes(self.cache.snapshot)}
        if not self._spent.keys() <= current or not self._seeded <= current:
            self._spent = {k: v for k, v in self._spent.items() if k in current}
            self._seeded &= current

    def known_spend(self, scope: Scope) -> int | None:
        """``scope``'s spend this period as this process last saw it (seeded from the store,
        then from each settle's answer): None before it was seen."""
        return self._spent.get(scope.budget_key)

    def settled(self, scopes: Sequence[Scope], totals: dict[str, int], cost: int) -> None:
        """After a settle: remember the counters and alert on thresholds crossed."""
        for s in scopes:
            total = totals.get(s.name)
            if total is None:
                continue
            self._spent[s.budget_key] = total
            self._alert(s, total - cost, total)

    def _alert(self, s: Scope, before: int, total: int) -> None:
        if self.alerts is None or s.budget_nusd is None or s.budget_nusd <= 0:
            return
        for pct in self.thresholds:
            mark = s.budget_nusd * pct // 100
            if before < mark <= total:
                kind, _, scope_id = s.name.partition(":")
                team = self.cache.team(scope_id) if kind == "team" else None
                name = team.name if team is not None else scope_id
                self.alerts.notify(
                    BudgetAlert(kind, scope_id, name, pct, nusd_to_usd(total),
                                nusd_to_usd(s.budget_nusd), s.period_start_ms)
                )  # fmt: skip

    async def _refresh(self) -> None:
        """Every ``refresh_s``: seed new scopes, forget ended ones, read every counter."""
        await self.seed()
        self._forget_ended()
        for _, _, _, s in list(self._budget_scopes(self.cache.snapshot)):
            value = await self.limiter.spent(s)
            if value is not None:
                self._spent[s.budget_key] = value
