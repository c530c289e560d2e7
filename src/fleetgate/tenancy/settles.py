"""`Settles`: every finished request's settle reaches the limiter, even across an outage.

A settle frees the request's parallel slot, trues up its tokens and adds its cost to the
budget counters. It runs in the background once the response is out. When the limiter cannot
be reached the settle waits in a bounded queue and is retried every ``retry_interval_s``;
without this a Redis blip would hold the parallel slots of every request in flight until
their lease ran out (15 minutes). A retried settle releases only: its cost is already in the
store (the spool does not depend on Redis), and after any outage
`fleetgate.tenancy.budgets.Budgets` raises the budget counters to the store's totals, so
adding it again would count it twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from fleetgate.errors import LimiterUnavailable
from fleetgate.limits.base import Limiter, Reservation, Scope
from fleetgate.tasks import cancel_and_wait

__all__ = ["Settles"]

log = logging.getLogger("fleetgate.tenancy.settles")

Settled = Callable[[tuple[Scope, ...], dict[str, int], int], None]


@dataclass(slots=True)
class _Pending:
    reservation: Reservation
    tokens: int
    cost_nusd: int


class Settles:
    """Runs settles in the background; queues and retries those the limiter could not take.
    ``on_settled(scopes, totals, cost)`` sees each applied settle (budget alerts)."""

    def __init__(
        self,
        limiter: Limiter,
        on_settled: Settled,
        *,
        retry_interval_s: float = 1.0,
        max_queued: int = 100_000,
        on_dropped: Callable[[], None] | None = None,
    ) -> None:
        self.limiter = limiter
        self.on_settled = on_settled
        self.retry_interval_s = retry_interval_s
        self._queue: deque[_Pending] = deque()
        self.max_queued = max_queued
        self._on_dropped = on_dropped
        self._running: set[asyncio.Future[Any]] = set()  # settles not answered yet
        self._retrier: asyncio.Task[None] | None = None
        self._closing = False

    def queued(self) -> int:
        return len(self._queue)

    def submit(self, reservation: Reservation, tokens: int, cost_nusd: int) -> asyncio.Future[Any]:
        """Settle in the background (never raises, never blocks); returns what finishes when
        the limiter has answered (the caller may wait for it, e.g. before a reply; its outcome
        is handled here). The limiter is called here, not in a task: `RedisLimiter` sends the
        command at once, so a settle submitted before the response is written reaches Redis
        before the client's next request. A limiter that answers with a future
        (`RedisLimiter`) is followed by a callback on it, without a task; an ``async def``
        settle runs in a task."""
        item = _Pending(reservation, tokens, cost_nusd)
        settle = self.limiter.settle(reservation, tokens, cost_nusd)
        if isinstance(settle, asyncio.Future):
            self._running.add(settle)
            settle.add_done_callback(partial(self._settle_done, item))
            return settle
        task = asyncio.get_running_loop().create_task(self._settle(item, settle))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    def _settle_done(self, item: _Pending, fut: asyncio.Future[dict[str, int]]) -> None:
        self._running.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self._applied(item, fut.result())
        elif isinstance(exc, LimiterUnavailable):
            self._unavailable(item)
        else:
            log.error("settle failed: %s", exc)

    async def _settle(
        self, item: _Pending, settle: Awaitable[dict[str, int]] | None = None
    ) -> bool:
        try:
            if settle is None:
                settle = self.limiter.settle(item.reservation, item.tokens, item.cost_nusd)
            totals = await settle
        except LimiterUnavailable:
            return self._unavailable(item)
        except Exception as exc:  # a bug must not lose the request; say so and drop it
            log.error("settle failed: %s", exc)
            return True
        self._applied(item, totals)
        return True

    def _applied(self, item: _Pending, totals: dict[str, int]) -> None:
        if totals:
            try:
                self.on_settled(item.reservation.scopes, totals, item.cost_nusd)
            except Exception:  # an alert bug must not stop later settles
                log.exception("settle: on_settled failed")

    def _unavailable(self, item: _Pending) -> bool:
        """The limiter could not take the settle: queue it (release only) unless nothing was
        held. Returns False (not applied)."""
        if not item.reservation.enforced:
            return False  # admitted without Redis: nothing to release, the cost is stored
        item.cost_nusd = 0  # from now on release only (see the module docstring)
        self._enqueue(item)
        return False

    def _enqueue(self, item: _Pending) -> None:
        if len(self._queue) >= self.max_queued:
            self._queue.popleft()  # the oldest: its lease is the nearest to running out
            if self._on_dropped is not None:
                self._on_dropped()
        self._queue.append(item)
        if not self._closing and (self._retrier is None or self._retrier.done()):
            self._retrier = asyncio.get_running_loop().create_task(self._retry())

    async def _retry(self) -> None:
        while self._queue:
            await asyncio.sleep(self.retry_interval_s)
            while self._queue:
                item = self._queue.popleft()
                if not await self._settle(item):
                    break  # still away (the item went back to the queue)
            else:
                log.info("limiter reachable again; queued settles applied")

    async def drain(self) -> None:
        """At shutdown: finish running settles and try the queued ones once."""
        self._closing = True
        if self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)
        await cancel_and_wait(self._retrier)
        for _ in range(len(self._queue)):
            if not await self._settle(self._queue.popleft()):
                break
