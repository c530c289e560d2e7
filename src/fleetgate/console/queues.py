"""The scheduler's queues (what ``GET /admin/queues`` serves, `pool_view`): per pool its limit,
requests running and queued by band, requests admitted per second, waits (the oldest queued
request's, and a new request's estimate by band), and per team its queued and running requests,
fair-share counter and quota state (within its nominal, borrowing, capped). The table refreshes
itself every few seconds through htmx. A team admin sees its own team's rows (and the pools'
totals, which its requests wait behind), as on the admin API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from fleetgate.console.core import ADMINS, Console
from fleetgate.console.forms import page_number, page_of
from fleetgate.scheduling.admin_routes import pool_view
from fleetgate.scheduling.config import BANDS
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.quota import BORROWING, CAPPED

__all__ = ["AdmissionRates", "QueuePage"]

REFRESH_S = 5


@dataclass
class AdmissionRates:
    """Requests admitted per second by pool: the pools' admission counters (`Pool.seq`) read
    at each view, the rate taken against the reading at least ``min_span_s`` old (the first
    view of a pool has none: no rate yet)."""

    min_span_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _last: dict[str, tuple[float, int]] = field(default_factory=dict)
    _rate: dict[str, float] = field(default_factory=dict)

    def read(self, pool: str, count: int) -> float | None:
        now = self.clock()
        last = self._last.get(pool)
        if last is None or count < last[1]:  # new, or a pool made again (counter restarted)
            self._last[pool] = (now, count)
            self._rate.pop(pool, None)
            return None
        span = now - last[0]
        if span >= self.min_span_s:
            self._rate[pool] = (count - last[1]) / span
            self._last[pool] = (now, count)
        return self._rate.get(pool)

    def forget(self, keep: set[str]) -> None:
        """Drop the readings of pools that are gone."""
        for name in set(self._last) - keep:
            self._last.pop(name, None)
            self._rate.pop(name, None)


def _quota_state(pool: Pool, team: str) -> str:
    tree = pool.quotas
    if tree is None:
        return "-"  # no quotas configured: fair share only
    if tree.status(team, 1) == CAPPED:
        return "capped"
    return "borrowing" if tree.status(team, 0) == BORROWING else "within quota"


class QueuePage:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.rates = AdmissionRates()

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/ui/queues", self.page)]

    def _pools(self, team: str | None) -> list[dict[str, Any]] | None:
        scheduler = self.console.scheduler
        if scheduler is None:
            return None
        now = time.monotonic()
        out = []
        pools = sorted(scheduler.pools.items())
        self.rates.forget({name for name, _ in pools})
        for name, pool in pools:
            view = pool_view(pool, team, now)
            view["admitted_per_s"] = self.rates.read(name, pool.seq)
            # A wait estimate only where a new request would queue (requests queued ahead of
            # it, or the pool at its limit); otherwise it is admitted at once, and the mean
            # service time is shown as what it is, not as a wait.
            waiting = {
                band: pool.queue.ahead_of(rank) > 0 or pool.saturated
                for rank, band in enumerate(BANDS)
            }
            view["would_queue"] = waiting
            view["estimated_wait_s"] = {
                band: pool.estimated_wait(rank) if waiting[band] else None
                for rank, band in enumerate(BANDS)
            }
            for t, row in view["teams"].items():
                row["quota"] = _quota_state(pool, t)
            out.append(view)
        return out

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        actor = session.principal
        team = None if actor.is_master else (actor.team_id or "")  # "" matches no team
        page = page_number(request.query.get("page"))
        size = self.console.config.page_size
        pools = self._pools(team)
        shown, more = (None, False) if pools is None else page_of(pools, page, size)
        return self.console.page(
            request, session, "queues.html", pools=shown, bands=BANDS, page=page,
            more=more, query="",
            refresh_s=REFRESH_S, team=team,
        )  # fmt: skip
