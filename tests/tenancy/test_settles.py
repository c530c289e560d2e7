"""Settles survive a limiter outage: queued, retried (releasing only: the budget counters
catch up from the store), bounded."""

from __future__ import annotations

import asyncio

from fleetgate.errors import LimiterUnavailable
from fleetgate.limits.base import Reservation, Scope
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.tenancy.settles import Settles

SCOPE = Scope("key:k", max_parallel=1, budget_nusd=1_000_000)


class FlakyLimiter(MemoryLimiter):
    """A MemoryLimiter whose settles fail while ``down`` (as if sent and lost, or not sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.lost_after_apply = False
        self.calls: list[int] = []

    async def settle(self, reservation: Reservation, tokens: int, cost_nusd: int) -> dict[str, int]:
        self.calls.append(cost_nusd)
        if not self.down:
            return await super().settle(reservation, tokens, cost_nusd)
        if self.lost_after_apply:  # it reached the store, the answer did not come back
            await super().settle(reservation, tokens, cost_nusd)
            raise LimiterUnavailable("lost", maybe_applied=True)
        raise LimiterUnavailable("not sent")


async def test_a_settle_that_fails_is_retried_until_the_limiter_is_back() -> None:
    limiter = FlakyLimiter()
    settles = Settles(limiter, lambda *_: None, retry_interval_s=0.02)
    first = await limiter.reserve("a", (SCOPE,), 1)
    assert isinstance(first, Reservation)
    limiter.down = True
    settles.submit(first, 1, 700)
    await asyncio.sleep(0.1)
    assert settles.queued() == 1
    # the slot is still held: a second request is refused for parallelism
    assert not isinstance(await limiter.reserve("b", (SCOPE,), 1), Reservation)
    limiter.down = False
    await asyncio.sleep(0.1)
    assert settles.queued() == 0
    assert limiter.calls[0] == 700 and set(limiter.calls[1:]) == {0}
    assert await limiter.spent(SCOPE) == 0  # the cost comes back from the store, not twice
    assert isinstance(await limiter.reserve("c", (SCOPE,), 1), Reservation)  # slot freed
    await settles.drain()


async def test_a_settle_lost_after_it_applied_is_not_counted_twice() -> None:
    limiter = FlakyLimiter()
    settles = Settles(limiter, lambda *_: None, retry_interval_s=0.02)
    r = await limiter.reserve("a", (SCOPE,), 1)
    assert isinstance(r, Reservation)
    limiter.down = limiter.lost_after_apply = True
    settles.submit(r, 1, 700)
    await asyncio.sleep(0.01)
    limiter.down = False
    await asyncio.sleep(0.1)
    assert limiter.calls[0] == 700 and limiter.calls[-1] == 0
    assert await limiter.spent(SCOPE) == 700  # counted once
    await settles.drain()


async def test_the_queue_is_bounded_and_drops_are_counted() -> None:
    limiter = FlakyLimiter()
    limiter.down = True
    dropped: list[int] = []
    settles = Settles(
        limiter,
        lambda *_: None,
        retry_interval_s=10,
        max_queued=3,
        on_dropped=lambda: dropped.append(1),
    )
    for i in range(5):
        settles.submit(Reservation(f"m{i}", (SCOPE,), 1), 1, 1)
    await asyncio.sleep(0.05)
    assert settles.queued() == 3 and len(dropped) == 2
    limiter.down = False
    await settles.drain()  # shutdown applies what it can, and leaves no task behind
    assert settles.queued() == 0
    assert limiter.calls[-3:] == [0, 0, 0]


async def test_a_request_admitted_without_the_limiter_is_not_queued() -> None:
    limiter = FlakyLimiter()
    limiter.down = True
    settles = Settles(limiter, lambda *_: None, retry_interval_s=10)
    settles.submit(Reservation("m", (SCOPE,), 1, enforced=False), 1, 5)
    await asyncio.sleep(0.05)
    assert limiter.calls == [5] and settles.queued() == 0  # tried once with its cost, no more
    await settles.drain()
