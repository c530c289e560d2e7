"""The admission queue: bands strictly, teams by counter, oldest first within a team."""

from __future__ import annotations

import asyncio

from fleetgate.scheduling.config import Band
from fleetgate.scheduling.queue import AdmissionQueue, Waiter
from fleetgate.scheduling.vtc import VirtualTokenCounters
from tests.scheduling.support import policy


def _waiter(loop: asyncio.AbstractEventLoop, team: str, band: Band, tokens: int = 10) -> Waiter:
    return Waiter(policy(team, band), tokens, 0.0, loop.create_future())


async def test_higher_bands_go_first_whatever_the_order_of_arrival() -> None:
    loop = asyncio.get_running_loop()
    queue = AdmissionQueue(VirtualTokenCounters())
    order: list[Band] = ["sheddable", "batch", "interactive", "critical", "batch", "critical"]
    for band in order:
        queue.push(_waiter(loop, "t", band))
    assert queue.depth() == [2, 1, 2, 1]
    popped = []
    while (w := queue.pop()) is not None:
        popped.append(w.policy.band)
    assert popped == ["critical", "critical", "interactive", "batch", "batch", "sheddable"]
    assert queue.size == 0


async def test_within_a_band_the_team_with_less_service_goes_first() -> None:
    loop = asyncio.get_running_loop()
    vtc = VirtualTokenCounters()
    queue = AdmissionQueue(vtc)
    first = [_waiter(loop, "a", "batch") for _ in range(3)]
    for w in first:
        queue.push(w)
    queue.push(_waiter(loop, "b", "batch"))
    vtc.charge("a", 50)
    w = queue.pop()
    assert w is not None and w.team == "b"
    assert queue.pop() is first[0]  # a's oldest


async def test_evict_takes_the_newest_of_the_lowest_band_below() -> None:
    loop = asyncio.get_running_loop()
    queue = AdmissionQueue(VirtualTokenCounters())
    old_batch = _waiter(loop, "a", "batch")
    new_batch = _waiter(loop, "b", "batch")
    shed = _waiter(loop, "a", "sheddable")
    inter = _waiter(loop, "c", "interactive")
    for w in (old_batch, shed, new_batch, inter):
        queue.push(w)
    assert queue.evict(above_rank=0) is shed
    assert queue.evict(above_rank=0) is new_batch
    assert queue.evict(above_rank=2) is None  # nothing below batch left
    assert queue.evict(above_rank=1) is old_batch
    assert queue.evict(above_rank=1) is None
    assert queue.size == 1


async def test_remove_and_counts() -> None:
    loop = asyncio.get_running_loop()
    queue = AdmissionQueue(VirtualTokenCounters())
    a, b = _waiter(loop, "a", "interactive"), _waiter(loop, "b", "critical")
    queue.push(a)
    queue.push(b)
    assert queue.ahead_of(0) == 1 and queue.ahead_of(1) == 2 and queue.ahead_of(3) == 2
    assert queue.teams() == {"a": 1, "b": 1}
    assert queue.remove(a) and not queue.remove(a)
    assert queue.waiters() == [b]
