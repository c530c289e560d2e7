"""The scheduler: fast path, queueing, reject vs queue, deadlines, preemption, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from fleetgate.errors import Overloaded, RateLimited
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.scheduler import Scheduler
from tests.scheduling.support import FakeOutcome, policy, scheduler_with_pool


async def _admit(scheduler: Scheduler, pool: Pool, p: RequestPolicy, tokens: int = 10) -> float:
    if scheduler.try_admit(pool, p, tokens):
        return 0.0
    return await scheduler.wait(pool, p, tokens, 0.0)


def _samples(registry: object, name: str) -> str:
    text: bytes = registry.render()  # type: ignore[attr-defined]
    return "\n".join(line for line in text.decode().splitlines() if line.startswith(name))


async def test_below_capacity_requests_pass_without_queueing() -> None:
    scheduler, pool, _ = scheduler_with_pool(3)
    for _ in range(3):
        assert scheduler.try_admit(pool, policy("a"), 10)
    assert pool.admitted == 3 and pool.queue.size == 0
    assert not scheduler.try_admit(pool, policy("a"), 10)


async def test_an_unbounded_pool_never_queues() -> None:
    scheduler, pool, _ = scheduler_with_pool(None)
    assert all(scheduler.try_admit(pool, policy("a"), 1) for _ in range(1000))


async def test_a_queued_request_is_admitted_when_a_slot_frees() -> None:
    scheduler, pool, registry = scheduler_with_pool(1)
    a = policy("a")
    await _admit(scheduler, pool, a)
    waiting = asyncio.create_task(_admit(scheduler, pool, policy("b")))
    await asyncio.sleep(0.01)
    assert not waiting.done() and pool.queue.size == 1
    scheduler.release(pool, a, 5, 0.2)
    waited = await asyncio.wait_for(waiting, 1)
    assert waited > 0 and pool.admitted == 1 and pool.queue.size == 0
    assert (
        'fleetgate_scheduling_queue_wait_seconds_count{pool="p",band="interactive",team="b"} 1'
        in (_samples(registry, "fleetgate_scheduling_queue_wait_seconds_count"))
    )


async def test_nobody_overtakes_the_queue_on_the_fast_path() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    a = policy("a")
    await _admit(scheduler, pool, a)
    queued = asyncio.create_task(_admit(scheduler, pool, policy("b")))
    await asyncio.sleep(0)
    pool.limit = 5  # room again, but b waits already: a newcomer queues behind
    assert not scheduler.try_admit(pool, policy("c"), 10)
    queued.cancel()


async def test_reject_policy_answers_429_with_retry_after() -> None:
    scheduler, pool, registry = scheduler_with_pool(1)
    await _admit(scheduler, pool, policy("a"))
    with pytest.raises(RateLimited) as err:
        await _admit(scheduler, pool, policy("b", reject=True))
    assert err.value.status == 429 and err.value.code == "pool_saturated"
    assert int(err.value.headers["Retry-After"]) >= 1
    assert pool.queue.size == 0
    assert 'reason="rejected"} 1' in _samples(registry, "fleetgate_scheduling_sheds_total")


async def test_queue_policy_waits_up_to_its_limit_then_503() -> None:
    scheduler, pool, registry = scheduler_with_pool(1)
    await _admit(scheduler, pool, policy("a"))
    started = asyncio.get_running_loop().time()
    with pytest.raises(Overloaded) as err:
        await _admit(scheduler, pool, policy("b", max_wait_s=0.1))
    assert 0.09 <= asyncio.get_running_loop().time() - started < 1.0
    assert err.value.status == 503 and err.value.code == "queue_timeout"
    assert "Retry-After" in err.value.headers
    assert pool.queue.size == 0 and pool.admitted == 1
    assert 'reason="queue_timeout"} 1' in _samples(registry, "fleetgate_scheduling_sheds_total")


async def test_a_deadline_that_cannot_be_met_is_shed_at_once() -> None:
    scheduler, pool, registry = scheduler_with_pool(2)
    a = policy("a")
    for _ in range(2):
        await _admit(scheduler, pool, a)
    pool.observe_service(2.0)  # a slot frees about every second
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(Overloaded) as err:
        await _admit(scheduler, pool, policy("b", deadline_s=0.3))
    assert loop.time() - started < 0.05  # early, not after waiting
    assert err.value.code == "deadline_unmeetable"
    assert err.value.headers["Retry-After"] == "1"
    # a deadline the estimate allows is queued
    waiting = asyncio.create_task(_admit(scheduler, pool, policy("c", deadline_s=5.0)))
    await asyncio.sleep(0.01)
    assert pool.queue.size == 1
    scheduler.release(pool, a, 0, 2.0)
    await asyncio.wait_for(waiting, 1)
    assert 'reason="deadline_unmeetable"} 1' in _samples(
        registry, "fleetgate_scheduling_sheds_total"
    )


async def test_a_deadline_passed_while_queued_is_shed() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    await _admit(scheduler, pool, policy("a"))
    with pytest.raises(Overloaded) as err:
        await scheduler.wait(pool, policy("b", deadline_s=0.3), 10, elapsed_s=0.25)
    assert err.value.code == "deadline_exceeded"


async def test_critical_overtakes_queued_lower_bands() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    a = policy("a")
    await _admit(scheduler, pool, a)
    order: list[str] = []

    async def one(p: RequestPolicy) -> None:
        await _admit(scheduler, pool, p)
        order.append(p.band)
        scheduler.release(pool, p, 0, 0.01)

    tasks = [asyncio.create_task(one(policy("b", band))) for band in ("batch", "interactive")]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(one(policy("c", "critical"))))
    await asyncio.sleep(0)
    scheduler.release(pool, a, 0, 0.01)
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert order == ["critical", "interactive", "batch"]


async def test_a_full_queue_lets_a_higher_band_preempt_the_newest_lower_one() -> None:
    scheduler, pool, registry = scheduler_with_pool(1, max_queue=2)
    await _admit(scheduler, pool, policy("a"))
    old = asyncio.create_task(_admit(scheduler, pool, policy("b", "batch")))
    new = asyncio.create_task(_admit(scheduler, pool, policy("b", "batch")))
    await asyncio.sleep(0)
    urgent = asyncio.create_task(_admit(scheduler, pool, policy("c", "interactive")))
    await asyncio.sleep(0.01)
    assert new.done()
    with pytest.raises(Overloaded) as err:
        new.result()
    assert err.value.code == "preempted" and err.value.status == 503
    assert not old.done() and not urgent.done()
    # the same band cannot preempt: the queue is full
    with pytest.raises(Overloaded) as full:
        await _admit(scheduler, pool, policy("d", "batch"))
    assert full.value.code == "queue_full"
    assert (
        'fleetgate_scheduling_preemptions_total{pool="p",band="batch",by_band="interactive"} 1'
        in _samples(registry, "fleetgate_scheduling_preemptions_total")
    )
    old.cancel()
    urgent.cancel()
    await asyncio.gather(old, urgent, return_exceptions=True)


async def test_the_critical_reserve_is_for_critical_only() -> None:
    scheduler, pool, _ = scheduler_with_pool(10, reserve=0.2)
    for _ in range(8):
        assert scheduler.try_admit(pool, policy("a", "batch"), 1)
    assert not scheduler.try_admit(pool, policy("a", "interactive"), 1)
    assert scheduler.try_admit(pool, policy("c", "critical"), 1)
    assert scheduler.try_admit(pool, policy("c", "critical"), 1)
    assert not scheduler.try_admit(pool, policy("c", "critical"), 1)


async def test_a_caller_that_leaves_the_queue_holds_nothing() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    a = policy("a")
    await _admit(scheduler, pool, a)
    gone = asyncio.create_task(_admit(scheduler, pool, policy("b")))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert pool.queue.size == 0
    scheduler.release(pool, a, 0, 0.1)
    assert pool.admitted == 0


async def test_a_caller_that_leaves_just_as_it_is_admitted_frees_its_slot() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    a = policy("a")
    await _admit(scheduler, pool, a)
    gone = asyncio.create_task(_admit(scheduler, pool, policy("b")))
    await asyncio.sleep(0)
    scheduler.release(pool, a, 0, 0.1)  # admits b (future resolved) ...
    gone.cancel()  # ... whose task is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert pool.admitted == 0


async def test_aclose_cancels_the_waiters() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    await _admit(scheduler, pool, policy("a"))
    waiting = asyncio.create_task(_admit(scheduler, pool, policy("b")))
    await asyncio.sleep(0)
    await scheduler.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.queue.size == 0


async def test_a_team_under_its_guarantee_starts_at_once_over_the_limit() -> None:
    scheduler, pool, _ = scheduler_with_pool(2)
    a, b = policy("a"), RequestPolicy("b", "interactive", 1.0, False, 10.0, None, guaranteed=1)
    await _admit(scheduler, pool, a)
    await _admit(scheduler, pool, a)  # a borrows b's idle share: the pool is full
    assert not scheduler.try_admit(pool, a, 10)
    assert scheduler.try_admit(pool, b, 10)  # b reclaims its guaranteed slot at once
    assert pool.admitted == 3 and pool.teams == {"a": 2, "b": 1}
    assert not scheduler.try_admit(pool, b, 10)  # beyond its guarantee it is like any other
    scheduler.release(pool, a, 0, 0.1)
    assert not scheduler.try_admit(pool, a, 10)  # still at the limit (3 - 1 = 2)
    scheduler.release(pool, b, 0, 0.1)
    assert pool.teams == {"a": 1} and scheduler.try_admit(pool, a, 10)


async def test_idle_means_nobody_queued_and_room_for_the_batch_band() -> None:
    scheduler, pool, _ = scheduler_with_pool(2, reserve=0.5)
    assert scheduler.idle("p")
    pool.take("a")  # the other slot is the critical reserve: no room for `batch`
    assert not scheduler.idle("p") and scheduler.idle("p", "critical")
    pool.give_back("a")
    pool.signal = True  # the engines say saturated
    assert not scheduler.idle("p")
    assert scheduler.idle("unknown")  # no pool: nothing to protect


async def test_queue_pacing_spreads_slots_that_free_together() -> None:
    # Four requests of 1 s each end together; with pacing 2 the pool (4 slots) turns over
    # 4/s x 2 = 8 starts/s: the next four start one by one, 125 ms apart, not at once.
    now = [100.0]
    scheduler, pool, _ = scheduler_with_pool(4, clock=lambda: now[0], queue_pacing=2.0)
    running = [policy(f"r{i}") for i in range(4)]
    for p in running:
        await _admit(scheduler, pool, p)
    waiting = [asyncio.create_task(_admit(scheduler, pool, policy("w"))) for _ in range(4)]
    await asyncio.sleep(0)
    assert pool.queue.size == 4
    for p in running:
        scheduler.release(pool, p, 10, 1.0)  # the mean service time is now 1 s
    assert pool.admitted == 1 and pool.queue.size == 3  # one start at once
    now[0] += 0.1
    scheduler.upkeep(pool)
    assert pool.admitted == 1  # 100 ms < 125 ms
    now[0] += 0.03
    scheduler.upkeep(pool)
    assert pool.admitted == 2
    critical = asyncio.create_task(_admit(scheduler, pool, policy("c", "critical")))
    await asyncio.sleep(0)
    assert critical.done() and pool.admitted == 3  # the critical band is never paced
    now[0] += 1.0  # the last slot
    scheduler.upkeep(pool)
    assert pool.admitted == 4 and pool.queue.size == 1
    for task in waiting:
        task.cancel()


async def test_without_pacing_slots_that_free_together_refill_at_once() -> None:
    scheduler, pool, _ = scheduler_with_pool(4)
    running = [policy(f"r{i}") for i in range(4)]
    for p in running:
        await _admit(scheduler, pool, p)
    waiting = [asyncio.create_task(_admit(scheduler, pool, policy("w"))) for _ in range(4)]
    await asyncio.sleep(0)
    for p in running:
        scheduler.release(pool, p, 10, 1.0)
    assert pool.admitted == 4 and pool.queue.size == 0
    await asyncio.gather(*waiting)


async def test_a_stream_at_its_last_chunk_gives_its_slot_to_the_next_request() -> None:
    """``start_before_end``: as a stream relays its last chunk but one its slot goes to the
    queued request (at most that many such streams at once); its own end then frees nothing
    more, and a cancelled stream gives nothing early (its cancellation frees the slot)."""
    scheduler, pool, _ = scheduler_with_pool(2, start_before_end=1)
    first, second = FakeOutcome(), FakeOutcome()
    runs = []
    for outcome in (first, second):
        assert scheduler.try_admit(pool, policy("a"), 10)
        runs.append(scheduler.started(pool, policy("a"), outcome, False, 10))
    waiting = [asyncio.create_task(_admit(scheduler, pool, policy("b"))) for _ in range(2)]
    await asyncio.sleep(0.01)
    scheduler.end_in_sight(pool, runs[0])
    await asyncio.wait_for(waiting[0], 1)  # the first stream's slot, before its end
    assert pool.admitted == 2 and pool.early == 1 and not waiting[1].done()
    scheduler.end_in_sight(pool, runs[1])  # one at a time: the second keeps its slot
    scheduler.end_in_sight(pool, runs[0])  # and once per stream
    await asyncio.sleep(0.01)
    assert pool.admitted == 2 and pool.early == 1 and not waiting[1].done()
    scheduler.finish(pool, runs[0], 10, 0.5)  # its end frees no second slot
    await asyncio.sleep(0.01)
    assert pool.admitted == 2 and pool.early == 0 and not waiting[1].done()
    scheduler.end_in_sight(pool, runs[1])  # now it may
    await asyncio.wait_for(waiting[1], 1)
    scheduler.finish(pool, runs[1], 10, 0.5)
    assert pool.admitted == 2 and pool.early == 0


async def test_without_start_before_end_a_stream_keeps_its_slot_to_its_end() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    assert scheduler.try_admit(pool, policy("a"), 10)
    running = scheduler.started(pool, policy("a"), FakeOutcome(), False, 10)
    waiting = asyncio.create_task(_admit(scheduler, pool, policy("b")))
    await asyncio.sleep(0.01)
    scheduler.end_in_sight(pool, running)
    await asyncio.sleep(0.01)
    assert not waiting.done() and pool.early == 0
    scheduler.finish(pool, running, 10, 0.5)
    await asyncio.wait_for(waiting, 1)
