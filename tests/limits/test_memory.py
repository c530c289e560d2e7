"""`MemoryLimiter`: exact to the millisecond, and its memory bounded by the window, not by the
request rate or by the number of scopes ever seen."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from fleetgate.limits import Denial, MemoryLimiter, Reservation, Scope

UNLIMITED = Scope("key:busy", rpm=10**9, tpm=2 * 10**9, max_parallel=10**6)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> float:
        return self.ms / 1000


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _held() -> int:
    return tracemalloc.get_traced_memory()[0]


async def test_the_window_slides_by_the_millisecond() -> None:
    clock = Clock()
    lim = MemoryLimiter(clock)
    scopes = (Scope("key:a", rpm=3, tpm=100),)
    for _ in range(2):  # two in the same millisecond share one slot
        r = await lim.reserve(f"m{clock.ms}-{_}", scopes, 30)
        assert isinstance(r, Reservation)
        await lim.settle(r, 10, 0)  # each settles to 10 of its 30
    clock.ms += 1
    third = await lim.reserve("m3", scopes, 80)  # 10 + 10 + 80 = 100
    assert isinstance(third, Reservation) and third.usage[0].remaining_tokens == 0
    clock.ms += 59_998  # 59.999 s after the first two: all three still count
    refused = await lim.reserve("m4", scopes, 1)
    assert isinstance(refused, Denial) and refused.reason == "requests"
    assert refused.retry_after_ms == 1
    clock.ms += 1  # 60 s after the first two: they leave the window, the third stays
    fourth = await lim.reserve("m5", scopes, 1)
    assert isinstance(fourth, Reservation)
    assert fourth.usage[0].remaining_requests == 1
    assert fourth.usage[0].remaining_tokens == 100 - 80 - 1


async def test_a_busy_scope_holds_memory_for_its_window_not_for_each_request(
    traced: None,
) -> None:
    clock = Clock()
    lim = MemoryLimiter(clock)
    before = _held()
    for i in range(60_000):  # 20 requests a millisecond for 3 s, each settled
        if i % 20 == 0:
            clock.ms += 1
        r = await lim.reserve(f"req_{i:024x}:{i:08x}", (UNLIMITED,), 40)
        assert isinstance(r, Reservation)
        await lim.settle(r, 30, 0)
    # one log entry per request would be ~20 MB here (~330 bytes each)
    assert _held() - before < 2_000_000


async def test_a_scope_idle_for_a_window_is_forgotten(traced: None) -> None:
    clock = Clock()
    lim = MemoryLimiter(clock)
    before = _held()
    for i in range(5_000):  # 5,000 keys, one request each (keys rotated, say)
        scope = Scope(f"key:{i}", rpm=100, tpm=10_000, max_parallel=4)
        r = await lim.reserve(f"m{i}", (scope,), 40)
        assert isinstance(r, Reservation)
        await lim.settle(r, 30, 0)
    assert _held() - before > 1_000_000
    clock.ms += 60_001
    assert isinstance(await lim.reserve("late", (Scope("key:other", rpm=1),), 1), Reservation)
    assert _held() - before < 100_000


async def test_a_settle_that_never_comes_frees_its_slot_after_the_lease() -> None:
    clock = Clock()
    lim = MemoryLimiter(clock)
    scopes = (Scope("key:p", max_parallel=1),)
    assert isinstance(await lim.reserve("lost", scopes, 1), Reservation)
    refused = await lim.reserve("next", scopes, 1)
    assert isinstance(refused, Denial) and refused.reason == "parallel"
    clock.ms += 15 * 60_000
    assert isinstance(await lim.reserve("next", scopes, 1), Reservation)


async def test_the_spend_of_an_ended_budget_period_is_forgotten() -> None:
    clock = Clock()
    lim = MemoryLimiter(clock)
    day = 86_400_000
    start = clock.ms - clock.ms % day
    for i in range(1_000):  # 1,000 budgeted keys spend in one daily period
        scope = Scope(f"key:{i}", budget_nusd=10**9, period_start_ms=start,
                      period_end_ms=start + day)  # fmt: skip
        r = await lim.reserve(f"m{i}", (scope,), 1)
        assert isinstance(r, Reservation)
        await lim.settle(r, 1, 5)
    assert await lim.spent(Scope("key:7", period_start_ms=start)) == 5
    clock.ms = start + day + 1  # the next period: the old counters are of no more use
    nxt = Scope("key:7", budget_nusd=10**9, period_start_ms=start + day,
                period_end_ms=start + 2 * day)  # fmt: skip
    r = await lim.reserve("n", (nxt,), 1)
    assert isinstance(r, Reservation)
    await lim.settle(r, 1, 3)
    assert len(lim._spend) == 1 and await lim.spent(nxt) == 3
    assert await lim.spent(Scope("key:7", period_start_ms=start)) == 0
