"""Claims over the limit cancel a stream without a claim (``preempt_streams_for_claims``),
and the critical reserve held only while the critical band is active."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool, Running
from fleetgate.scheduling.preempt import claim_victim, starved_victim
from fleetgate.scheduling.scheduler import Scheduler
from tests.scheduling.support import Clock, FakeOutcome, policy, scheduler_with_pool


def _guaranteed(team: str, band: str = "interactive", n: int = 1) -> RequestPolicy:
    return RequestPolicy(team, band, 1.0, False, 10.0, None, guaranteed=n)  # type: ignore[arg-type]


def _start(
    scheduler: Scheduler, pool: Pool, p: RequestPolicy, relayed: int = 0, within: bool = False
) -> Running:
    """Admit ``p`` at once (it must fit, or be a claim) and start it, as the stage does."""
    within = within or scheduler.within(pool, p)
    assert scheduler.try_admit(pool, p, 10)
    return scheduler.started(pool, p, FakeOutcome(relayed), within)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _full_of_batch(relayed: list[int], **config: Any) -> tuple[Scheduler, Pool, list[Running]]:
    scheduler, pool, _ = scheduler_with_pool(len(relayed), **config)
    runs = [_start(scheduler, pool, policy("etl", "batch"), r) for r in relayed]
    return scheduler, pool, runs


def test_the_victim_is_the_lowest_band_stream_without_a_claim_that_sent_least() -> None:
    scheduler, pool, _ = scheduler_with_pool(10, preempt_streams_for_claims="lower_band")
    chat = _start(scheduler, pool, policy("app"), relayed=0)
    claimed = _start(scheduler, pool, policy("etl", "batch"), relayed=0, within=True)
    old = _start(scheduler, pool, policy("etl", "batch"), relayed=3)
    busy = _start(scheduler, pool, policy("etl", "batch"), relayed=9)
    new = _start(scheduler, pool, policy("etl", "batch"), relayed=3)
    crit = policy("oncall", "critical")
    assert claim_victim(pool, crit, borrowers=False) is new  # least output, then the newest
    new.cancel_at, new.cancel = 1.0, RuntimeError()  # type: ignore[assignment]
    assert claim_victim(pool, crit, borrowers=False) is old
    old.cancel = busy.cancel = RuntimeError()  # type: ignore[assignment]
    assert claim_victim(pool, crit, borrowers=False) is chat  # then the next band up
    assert claimed.cancel is None and claim_victim(pool, policy("x"), borrowers=False) is None
    # an interactive claim never takes a stream of its own band without `borrowers`
    assert claim_victim(pool, _guaranteed("b"), borrowers=False) is None


def test_with_engine_waiting_the_victim_holds_an_engine_slot() -> None:
    """``engine_waiting``: of the streams without output, the newest may be waiting inside
    the engine (cancelling it frees no slot there); an older one is in its prefill, holding
    a slot, and is cancelled (requeued: no output lost); with none such, the stream that has
    begun with the least output (a claim) or the newest that has begun (a starved request)."""
    scheduler, pool, _ = scheduler_with_pool(10, preempt_streams_for_claims="borrowers")
    pool.waiting = 1
    early = _start(scheduler, pool, policy("etl", "batch"), relayed=4)
    late = _start(scheduler, pool, policy("etl", "batch"), relayed=2)
    prefill = _start(scheduler, pool, policy("etl", "batch"), relayed=0)
    waiting = _start(scheduler, pool, policy("etl", "batch"), relayed=0)
    crit = policy("oncall", "critical")
    assert claim_victim(pool, crit, False) is prefill
    assert starved_victim(pool, 1, "app", False) is prefill
    prefill.cancel = RuntimeError()  # type: ignore[assignment]
    assert claim_victim(pool, crit, False) is late  # begun, the least output
    assert starved_victim(pool, 1, "app", False) is late  # begun, the newest
    early.cancel = late.cancel = RuntimeError()  # type: ignore[assignment]
    assert claim_victim(pool, crit, False) is waiting  # nothing else left
    assert starved_victim(pool, 1, "app", False) is waiting
    pool.waiting = 0  # without: the least output, then the newest (as before)
    early.cancel = late.cancel = prefill.cancel = None
    assert claim_victim(pool, crit, False) is waiting
    assert starved_victim(pool, 1, "app", False) is waiting


def test_with_start_before_end_the_request_given_an_ending_slot_is_not_the_victim() -> None:
    """``start_before_end``: a stream at its last chunk gave its slot to the newest request,
    which waits inside the engine for that slot (cancelling it frees none); the released
    stream itself is no victim either (its slot is already given)."""
    scheduler, pool, _ = scheduler_with_pool(
        3, preempt_streams_for_claims="borrowers", start_before_end=1
    )
    begun = _start(scheduler, pool, policy("etl", "batch"), relayed=2)
    prefill = _start(scheduler, pool, policy("etl", "batch"), relayed=0)
    ending = _start(scheduler, pool, policy("etl", "batch"), relayed=9)
    scheduler.end_in_sight(pool, ending)
    assert ending.released and pool.early == 1
    given = _start(scheduler, pool, policy("etl", "batch"), relayed=0)  # the ending's slot
    crit = policy("oncall", "critical")
    assert claim_victim(pool, crit, False) is prefill
    assert starved_victim(pool, 1, "app", False) is prefill
    prefill.cancel = begun.cancel = RuntimeError()  # type: ignore[assignment]
    assert claim_victim(pool, crit, False) is given  # nothing else left: not the released
    assert starved_victim(pool, 1, "app", False) is given
    scheduler.finish(pool, ending, 10, 0.1)
    assert pool.early == 0


def test_a_stream_whose_response_is_complete_is_never_a_victim() -> None:
    """Done relaying (it waits only for the upstream connection's end): cancelling it would
    free nothing sooner and answer its client twice."""
    scheduler, pool, _ = scheduler_with_pool(4, preempt_streams_for_claims="lower_band")
    done = _start(scheduler, pool, policy("etl", "batch"), relayed=0)
    done.outcome.settled = True
    crit = policy("oncall", "critical")
    assert claim_victim(pool, crit, borrowers=False) is None
    live = _start(scheduler, pool, policy("etl", "batch"), relayed=5)
    assert claim_victim(pool, crit, borrowers=False) is live


def test_critical_streams_and_non_streams_are_never_victims() -> None:
    scheduler, pool, _ = scheduler_with_pool(4, preempt_streams_for_claims="borrowers")
    crit = _start(scheduler, pool, policy("oncall", "critical"))
    whole = _start(scheduler, pool, policy("etl", "batch"))
    whole.cancellable = False  # the stage does this for a non-streaming request
    assert not crit.cancellable
    assert claim_victim(pool, policy("c2", "critical"), borrowers=True) is None


def test_with_borrowers_a_guarantee_takes_a_same_band_stream_of_a_team_without_a_claim() -> None:
    scheduler, pool, _ = scheduler_with_pool(2, preempt_streams_for_claims="borrowers")
    a = [_start(scheduler, pool, policy("a")) for _ in range(2)]
    b = _start(scheduler, pool, _guaranteed("b"))  # over the limit: b reclaims at once
    assert pool.admitted == 3
    assert a[1].cancel is not None and a[0].cancel is None  # the newest of a
    assert b.within and b.cancel is None


def test_a_claim_over_the_limit_cancels_one_stream_one_per_claim() -> None:
    scheduler, pool, runs = _full_of_batch([5, 5, 5], preempt_streams_for_claims="lower_band")
    oncall = _guaranteed("oncall", "critical", n=4)
    _start(scheduler, pool, oncall)  # over the limit by one
    cut = [r for r in runs if r.cancel is not None]
    assert cut == [runs[2]]
    assert cut[0].cancel is not None and cut[0].cancel.code == "preempted_in_flight"
    assert cut[0].cancel.status == 503 and cut[0].cancel.retry_after
    _start(scheduler, pool, oncall)  # over by two: a second victim
    assert [r for r in runs if r.cancel is not None] == [runs[1], runs[2]]
    scheduler.finish(pool, runs[2], 5, 0.1)  # the relay ended it
    scheduler.finish(pool, runs[1], 5, 0.1)
    assert pool.admitted == 3 and runs[0].cancel is None  # back at the limit: nothing more


def test_a_claim_waits_for_a_stream_about_to_end_instead_of_cutting_one() -> None:
    """A stream that has sent all but its last chunk of ``max_tokens`` (or whose response is
    complete) frees its slot within about an engine step: a claim over the limit counts it as
    a slot on its way, as a cancellation already sent, and cuts nobody; a second claim over
    the limit still cuts one."""
    scheduler, pool, _ = scheduler_with_pool(3, preempt_streams_for_claims="lower_band")
    runs = [
        scheduler.started(pool, p, FakeOutcome(r), False, 24)
        for p, r in ((policy("etl", "batch"), 5), (policy("etl", "batch"), 23),
                     (policy("etl", "batch"), 2))
    ]  # fmt: skip
    for _ in runs:
        pool.take("etl")
    oncall = _guaranteed("oncall", "critical", n=4)
    _start(scheduler, pool, oncall)  # over the limit by one: runs[1] ends within a step
    assert all(r.cancel is None for r in runs)
    _start(scheduler, pool, oncall)  # over by two: one cut (the least output)
    assert [r for r in runs if r.cancel is not None] == [runs[2]]
    scheduler, pool, runs = _full_of_batch([5, 2], preempt_streams_for_claims="lower_band")
    runs[0].outcome.settled = True  # complete: it ends on its own
    _start(scheduler, pool, oncall)
    assert all(r.cancel is None for r in runs)
    _start(scheduler, pool, oncall)
    assert runs[1].cancel is not None


@pytest.mark.parametrize("early", ["no", "waiting", "begun"])
def test_a_started_claim_counts_on_no_end_while_an_early_start_may_wait_in_the_engine(
    early: str,
) -> None:
    """``start_before_end``: while a request given an ending stream's slot may wait inside
    the engine (that stream not ended yet), a claim that starts over the limit would wait
    there beside it: it counts on no end. It cancels that request instead (the newest
    stream without output: it is requeued, nothing lost, and the claim takes the slot
    within the step); once that one has begun, the stream with the least output. The
    stream it cut is its `Running.cut` (the stage sends the claim once that one ended)."""
    scheduler, pool, _ = scheduler_with_pool(
        3 if early == "no" else 4, preempt_streams_for_claims="lower_band", start_before_end=1
    )
    batch = policy("etl", "batch")
    released = _start_with(scheduler, pool, batch, relayed=9, max_tokens=10)
    other_ending = _start_with(scheduler, pool, batch, relayed=9, max_tokens=10)
    least = _start_with(scheduler, pool, batch, relayed=3, max_tokens=10)
    taker = None
    if early != "no":
        _start_with(scheduler, pool, batch, relayed=5, max_tokens=10)  # the pool is full
        scheduler.end_in_sight(pool, released)
        assert pool.early == 1
        taker = _start_with(scheduler, pool, batch, relayed=0, max_tokens=10)  # its slot
        if early == "begun":
            taker.outcome.relayed = 4
    claim = _start(scheduler, pool, _guaranteed("oncall", "critical", n=4))  # over the limit
    cut = [r for r in pool.running if r.cancel is not None]
    want = {"no": [], "waiting": [taker], "begun": [least]}[early]
    assert cut == want and other_ending.cancel is None
    assert claim.cut is (want[0] if want else None)
    assert claim.awaits == (math.inf if early == "no" else 0.0)  # the end it counts on
    scheduler.finish(pool, released, 10, 0.1)
    assert pool.early == 0


def _start_with(
    scheduler: Scheduler, pool: Pool, p: RequestPolicy, relayed: int, max_tokens: int
) -> Running:
    assert scheduler.try_admit(pool, p, 10)
    return scheduler.started(pool, p, FakeOutcome(relayed), False, max_tokens)


def test_within_the_limit_a_claim_cancels_nothing_and_without_the_setting_never() -> None:
    scheduler, pool, runs = _full_of_batch([1, 1], preempt_streams_for_claims="lower_band")
    scheduler.finish(pool, runs[0], 1, 0.1)
    _start(scheduler, pool, policy("oncall", "critical"))  # fits: nobody is cut
    assert runs[1].cancel is None
    scheduler, pool, runs = _full_of_batch([1, 1], preempt_in_flight_after_s=5.0)
    _start(scheduler, pool, _guaranteed("oncall", "critical"))
    assert all(r.cancel is None for r in runs)


async def test_a_queued_critical_request_cancels_a_stream_and_takes_its_slot() -> None:
    scheduler, pool, runs = _full_of_batch([2, 7], preempt_streams_for_claims="lower_band")
    crit = policy("oncall", "critical")
    assert not scheduler.try_admit(pool, crit, 10)
    waiting = asyncio.create_task(scheduler.wait(pool, crit, 10, 0.0))
    await _settle()
    assert runs[0].cancel is not None and runs[1].cancel is None  # at once, no starvation wait
    scheduler.finish(pool, runs[0], 2, 0.1)  # billed for its 2 chunks; the slot goes to critical
    await _settle()
    assert waiting.done() and waiting.exception() is None
    assert pool.teams == {"etl": 1, "oncall": 1}


@pytest.mark.parametrize("released", [False, True])
async def test_a_queued_claim_waits_only_for_an_ending_stream_whose_slot_is_still_its(
    released: bool,
) -> None:
    """A stream one chunk from its end frees its slot for the queue within a step: a queued
    critical request waits for it rather than cutting another. Once that slot has gone to
    the next request (`start_before_end`), its end frees nothing for the queue: it cuts."""
    scheduler, pool, _ = scheduler_with_pool(
        2, preempt_streams_for_claims="lower_band", start_before_end=1
    )
    batch = policy("etl", "batch")
    assert scheduler.try_admit(pool, batch, 10)
    ending = scheduler.started(pool, batch, FakeOutcome(9), False, 10)
    assert scheduler.try_admit(pool, batch, 10)
    other = scheduler.started(pool, batch, FakeOutcome(3), False, 10)
    if released:
        scheduler.end_in_sight(pool, ending)
        assert scheduler.try_admit(pool, batch, 10)  # its slot, to the next request
        scheduler.started(pool, batch, FakeOutcome(0), False, 10)
    crit = policy("oncall", "critical")
    waiting = asyncio.create_task(scheduler.wait(pool, crit, 10, 0.0))
    await _settle()
    assert (other.cancel is not None) is released
    waiting.cancel()


def test_the_reserve_is_held_only_while_the_critical_band_is_active() -> None:
    clock = Clock()
    scheduler, pool, _ = scheduler_with_pool(
        4, reserve=0.5, clock=clock, critical_reserve_hold_s=10.0
    )
    batch = policy("etl", "batch")
    for _ in range(4):  # no critical traffic yet: the reserve is free for everyone
        assert scheduler.try_admit(pool, batch, 1)
    scheduler.release(pool, batch, 0, 1.0)
    assert scheduler.try_admit(pool, policy("oncall", "critical"), 1)  # now held
    for _ in range(3):
        scheduler.release(pool, batch, 0, 1.0)
    assert scheduler.try_admit(pool, batch, 1)  # 2 in flight of 4, 2 reserved
    assert not scheduler.try_admit(pool, batch, 1)
    clock.now += 9.0
    scheduler.upkeep(pool)
    assert not scheduler.try_admit(pool, batch, 1)  # still within the hold
    clock.now += 2.0
    scheduler.upkeep(pool)  # the poll: no critical request for 11 s, the reserve is lent
    assert scheduler.try_admit(pool, batch, 1)


def test_without_a_hold_the_reserve_is_always_held() -> None:
    scheduler, pool, _ = scheduler_with_pool(4, reserve=0.5)
    batch = policy("etl", "batch")
    assert scheduler.try_admit(pool, batch, 1) and scheduler.try_admit(pool, batch, 1)
    assert not scheduler.try_admit(pool, batch, 1)


def test_another_process_s_order_cuts_one_fewer_when_a_stream_here_is_about_to_end() -> None:
    scheduler, pool, _ = scheduler_with_pool(3, preempt_streams_for_claims="lower_band")
    runs = [
        scheduler.started(pool, policy("etl", "batch"), FakeOutcome(r), False, 24)
        for r in (5, 23, 2)
    ]
    for _ in runs:
        pool.take("etl")
    by = policy("app")
    scheduler.preemption.obey_order(pool, by, False, 2)  # runs[1] ends within a step
    assert [r for r in runs if r.cancel is not None] == [runs[2]]
    runs[1].outcome.relayed = 10  # not about to end: a later order cuts all it asks for
    scheduler.preemption.obey_order(pool, by, False, 2)
    assert all(r.cancel is not None for r in runs)


def test_a_claim_that_waited_for_an_end_in_vain_cuts_at_the_poll() -> None:
    """A claim over the limit counts a stream one chunk from its end as its slot (no cut);
    when it still has no output by when that slot should have been its (here: the end came
    later than its pace said), the poll reclaims for it again, and it cuts."""
    clock = Clock()
    scheduler, pool, _ = scheduler_with_pool(
        2, clock=clock, preempt_streams_for_claims="lower_band"
    )
    batch = policy("etl", "batch")
    assert scheduler.try_admit(pool, batch, 10)
    ending = scheduler.started(pool, batch, FakeOutcome(9), False, 10)
    ending.paced_at, ending.paced_from = clock.now - 0.16, 1  # 8 chunks in 160 ms
    assert scheduler.try_admit(pool, batch, 10)
    other = scheduler.started(pool, batch, FakeOutcome(3), False, 10)
    crit = policy("oncall", "critical")
    assert scheduler.try_admit(pool, crit, 10) is False
    pool.admitted += 1  # the claim starts over the limit (as a guarantee would)
    claim = scheduler.started(pool, crit, FakeOutcome(), True, 10)
    assert other.cancel is None and claim.awaits == clock.now + 2.5 * 0.02
    scheduler.upkeep(pool)
    assert other.cancel is None  # not due yet
    clock.now += 0.06
    scheduler.upkeep(pool)
    assert other.cancel is not None and claim.awaits == 0
