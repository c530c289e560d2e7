"""A fleet's shared admission (`fleet.Fleet`, `fleet_state.FleetState`) against the real Redis:
several schedulers in one event loop stand for several gateway processes; each test has its
own key prefix. The syncs are called by the test (no background loop) so each step is seen."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fleetgate.resp import RespClient
from fleetgate.scheduling.config import SchedulingConfig
from fleetgate.scheduling.fleet import Fleet
from fleetgate.scheduling.fleet_state import FleetState
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.quota import BORROWING, CAPPED, UNDER
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.telemetry.registry import Registry
from tests.procs import metric_value
from tests.scheduling.support import Clock, FakeOutcome, policy
from tests.scheduling.test_state import OneAlias

REDIS = "redis://127.0.0.1:6379"


@pytest.fixture
async def redis() -> AsyncIterator[RespClient]:
    client = RespClient(REDIS)
    try:
        yield client
    finally:
        await client.aclose()


class Fleetish:
    """``count`` processes of one fleet: a scheduler and a `Fleet` each, one alias ``chat``."""

    def __init__(self, redis: RespClient, count: int, seqs: int, **config: Any) -> None:
        fleet_cfg = {"key_prefix": f"t{secrets.token_hex(4)}:", **config.pop("fleet", {})}
        self.config = SchedulingConfig.model_validate({**config, "fleet": fleet_cfg})
        self.table = OneAlias(seqs)
        self.fleets: list[Fleet] = []
        self.schedulers: list[Scheduler] = []
        self.registries: list[Registry] = []
        self.clocks: list[Clock] = []
        self.redis = redis
        for i in range(count):
            self.add(f"proc-{i}")

    def add(self, name: str, failure: Any = "fail_closed", redis: Any = None) -> int:
        clock = Clock()  # the process's one clock (its scheduler's and its fleet's)
        self.clocks.append(clock)
        fleet = Fleet(
            redis or self.redis, self.config.fleet, failure=failure, process=name, clock=clock
        )
        routes: Any = self.table
        registry = Registry()
        self.registries.append(registry)
        scheduler = Scheduler(
            self.config, lambda: routes, SchedulingMetrics(registry), clock=clock, link=fleet
        )
        fleet.attach(scheduler)
        scheduler.pool("chat")  # made now, as a process's first request would
        self.fleets.append(fleet)
        self.schedulers.append(scheduler)
        return len(self.fleets) - 1

    def pool(self, i: int) -> Pool:
        pool = self.schedulers[i].pool("chat")
        assert pool is not None
        return pool

    def state(self, i: int) -> FleetState:
        state = self.pool(i).state
        assert isinstance(state, FleetState)
        return state

    async def sync(self, *which: int) -> None:
        for i in which or range(len(self.fleets)):
            await self.fleets[i].sync()

    def admit(self, i: int, team: str, n: int, band: Any = "interactive") -> int:
        """Admit up to ``n`` requests of ``team`` at process ``i`` on the fast path."""
        got = 0
        for _ in range(n):
            if self.schedulers[i].try_admit(self.pool(i), policy(team, band), 10):
                got += 1
        return got


async def test_leases_never_add_up_past_the_pool_and_idle_slices_come_back(
    redis: RespClient,
) -> None:
    fleet = Fleetish(redis, 3, seqs=8, fleet={"lease_slice": 2})
    for i in range(3):
        assert fleet.admit(i, "a", 1) == 0  # nothing leased before the first sync
    await fleet.sync()
    assert [fleet.state(i).lease for i in range(3)] == [2, 2, 2]
    # Process 0 takes what it can; the others' spare slices stay theirs.
    took = 0
    for _ in range(6):
        took += fleet.admit(0, "a", 8)
        await fleet.sync(0)
    assert took == 4  # 8 - the two slices of 2 held by the others
    leases = [fleet.state(i).lease or 0 for i in range(3)]
    assert sum(leases) <= 8
    # The others see the fleet's count and process 0's teams.
    await fleet.sync(1)
    assert fleet.pool(1).admitted == 4 and fleet.pool(1).teams == {"a": 4}
    # Process 0's requests end: at its next sync it keeps only a slice.
    for _ in range(4):
        fleet.schedulers[0].release(fleet.pool(0), policy("a"), 0, 0.1)
    await fleet.sync(0)  # it saw contention (its wants past the pool): it keeps nothing spare
    assert fleet.state(0).lease == 0
    await fleet.sync(0)  # no contention now: a slice again
    assert fleet.state(0).lease == 2


async def test_a_queued_request_takes_a_slot_freed_in_another_process(redis: RespClient) -> None:
    fleet = Fleetish(redis, 2, seqs=4, fleet={"lease_slice": 1})
    await fleet.sync()
    a, b = fleet.schedulers
    for _ in range(4):
        fleet.admit(0, "a", 4)
        await fleet.sync(0)
    assert fleet.state(0).own == 3 and fleet.state(1).lease == 1
    assert fleet.admit(1, "b", 1) == 1  # its slice
    waiting = asyncio.ensure_future(b.wait(fleet.pool(1), policy("b"), 10, 0.0))
    await asyncio.sleep(0)
    assert not waiting.done() and fleet.pool(1).queue.size == 1
    await fleet.sync()  # the pool is full: nothing to grant
    assert not waiting.done()
    a.release(fleet.pool(0), policy("a"), 0, 0.1)
    await fleet.sync(0)  # process 0, over its fair share, returns the slot freed...
    await fleet.sync(1)  # ... and process 1 leases it for its queue and admits
    await asyncio.wait_for(waiting, 1.0)
    assert fleet.state(1).own == 2
    assert sum(fleet.state(i).lease or 0 for i in range(2)) <= 4


async def test_at_contention_each_process_gets_its_fair_share_as_its_requests_end(
    redis: RespClient,
) -> None:
    fleet = Fleetish(redis, 2, seqs=16, fleet={"lease_slice": 16})
    await fleet.sync(0)
    assert fleet.admit(0, "a", 16) == 16  # alone, process 0 leased the whole pool
    await fleet.sync(1)
    assert fleet.state(1).lease == 0
    waiters = [
        asyncio.ensure_future(fleet.schedulers[1].wait(fleet.pool(1), policy("b"), 1, 0.0))
        for _ in range(10)
    ]
    await asyncio.sleep(0)
    await fleet.sync(1)
    await fleet.sync(0)
    assert fleet.state(0).fair == 8  # the max-min fair level of the two wants
    # Process 0 keeps what runs, and gives a slot back each time one ends, down to 8.
    for n in range(8):
        fleet.schedulers[0].release(fleet.pool(0), policy("a"), 0, 0.1)
        assert fleet.admit(0, "a", 1) == 0  # over its share: it does not refill
        await fleet.sync(0)
        await fleet.sync(1)
        assert fleet.state(1).own == n + 1  # one more of its queue admitted
    assert fleet.state(0).lease == 8 and fleet.state(1).own == 8
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_a_dead_process_slots_return_after_the_lease_ttl(redis: RespClient) -> None:
    fleet = Fleetish(redis, 2, seqs=4, fleet={"lease_slice": 4, "lease_ttl_s": 0.3})
    await fleet.sync(0)
    assert fleet.admit(0, "a", 4) == 4
    await fleet.sync()
    assert fleet.state(1).lease == 0
    # Process 0 dies: it never syncs again. Within the TTL its slots stay its own...
    await asyncio.sleep(0.1)
    await fleet.sync(1)
    assert fleet.state(1).lease == 0
    await asyncio.sleep(0.3)
    await fleet.sync(1)  # ... past it they are purged and leased at the same step
    assert fleet.state(1).lease == 4 and fleet.pool(1).admitted == 0
    assert fleet.admit(1, "b", 4) == 4


async def test_a_process_that_stops_hands_its_leases_back_at_once(redis: RespClient) -> None:
    fleet = Fleetish(redis, 2, seqs=4, fleet={"lease_slice": 4, "lease_ttl_s": 30})
    await fleet.sync(0)
    assert fleet.state(0).lease == 4
    await fleet.fleets[0].aclose()
    await fleet.sync(1)
    assert fleet.state(1).lease == 4


async def test_team_quotas_count_every_process(redis: RespClient) -> None:
    quota = {"concurrency": {"nominal": 2, "borrowing_limit": 1}}
    fleet = Fleetish(redis, 2, seqs=16, teams={"a": {"quota": quota}, "b": {"quota": quota}})
    await fleet.sync()
    assert fleet.admit(0, "a", 2) == 2
    quotas = fleet.pool(1).quotas
    assert quotas is not None and quotas.status("a") == UNDER  # not synced yet
    await fleet.sync(0)
    await fleet.sync(1)
    assert quotas.status("a") == BORROWING  # process 0's two count here
    assert fleet.admit(1, "a", 5) == 1  # nominal 2 + borrowing 1, fleet-wide
    assert quotas.status("a") == CAPPED
    assert quotas.usage()["team:a"]["in_flight"] == 3
    assert fleet.admit(1, "b", 1) == 1  # b is under its own nominal


async def test_guarantees_count_every_process_and_each_holds_its_share(
    redis: RespClient,
) -> None:
    fleet = Fleetish(redis, 2, seqs=2, teams={"g": {"guaranteed": 2}})
    pools = fleet.pool(0), fleet.pool(1)
    assert not pools[0].within_guarantee("g", 2)  # before its first sync: no share known
    await fleet.sync()
    await fleet.sync()
    g = policy("g")
    g = type(g)(g.team, g.band, g.weight, g.reject, g.max_wait_s, g.deadline_s, 2)
    assert pools[0].within_guarantee("g", 2)
    assert fleet.schedulers[0].try_admit(pools[0], g, 1)
    # Two live processes: each holds one of the two guaranteed slots.
    assert not pools[0].within_guarantee("g", 2)
    await fleet.sync(0)
    await fleet.sync(1)
    assert pools[1].within_guarantee("g", 2)
    assert fleet.schedulers[1].try_admit(pools[1], g, 1)
    await fleet.sync(1)
    await fleet.sync(0)
    assert pools[0].teams["g"] == 2 and not pools[0].within_guarantee("g", 2)
    fleet.schedulers[0].release(pools[0], g, 0, 0.1)
    await fleet.sync(0)
    await fleet.sync(1)
    assert not pools[1].within_guarantee("g", 2)  # its own share is in use
    assert pools[0].within_guarantee("g", 2)


async def test_fair_share_counters_are_the_fleet_s(redis: RespClient) -> None:
    fleet = Fleetish(redis, 2, seqs=16)
    await fleet.sync()
    fleet.admit(0, "a", 1)  # charges 10 prompt tokens
    fleet.pool(1).vtc.charge("a", 5)
    await fleet.sync(0)
    await fleet.sync(1)
    await fleet.sync(0)
    assert fleet.pool(0).vtc.value("a") == 15 and fleet.pool(1).vtc.value("a") == 15
    assert fleet.pool(1).vtc.fairest(["a", "b"]) == "b"


async def test_a_starved_request_cancels_a_lower_band_stream_of_another_process(
    redis: RespClient,
) -> None:
    fleet = Fleetish(redis, 2, seqs=2, fleet={"lease_slice": 1}, preempt_in_flight_after_s=0.0)
    await fleet.sync()
    s0, s1 = fleet.schedulers
    assert fleet.admit(1, "batchy", 1, band="batch") == 1
    cancelled: list[Any] = []
    running = s1.started(fleet.pool(1), policy("batchy", "batch"), FakeOutcome(), False)
    running.abort = cancelled.append
    assert fleet.admit(0, "x", 1) == 1
    await fleet.sync(1)
    await fleet.sync(0)
    # Process 0's interactive request waits, the pool full; its poll finds no victim here.
    waiting = asyncio.ensure_future(s0.wait(fleet.pool(0), policy("y"), 1, 0.0))
    await asyncio.sleep(0)
    s0.upkeep(fleet.pool(0))
    await fleet.sync(0)  # the order goes to process 1 ...
    await fleet.sync(1)  # ... which cancels its batch stream
    assert len(cancelled) == 1 and cancelled[0].code == "preempted_in_flight"
    s1.finish(fleet.pool(1), running, 0, None)
    await fleet.sync(1)
    await fleet.sync(0)
    await asyncio.wait_for(waiting, 1.0)


async def test_batch_lane_is_not_idle_while_another_process_queues(redis: RespClient) -> None:
    fleet = Fleetish(redis, 2, seqs=2, fleet={"lease_slice": 1})
    await fleet.sync()
    assert fleet.schedulers[1].idle("chat")
    fleet.admit(0, "a", 1)
    fleet.admit(1, "a", 1)
    waiting = asyncio.ensure_future(fleet.schedulers[0].wait(fleet.pool(0), policy("a"), 1, 0.0))
    await asyncio.sleep(0)
    await fleet.sync(0)
    await fleet.sync(1)
    assert not fleet.schedulers[1].idle("chat")
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


@pytest.mark.parametrize("failure", ["fail_open", "fail_closed"])
async def test_redis_unreachable_past_the_ttl_applies_the_policy(
    redis: RespClient, failure: str
) -> None:
    fleet = Fleetish(redis, 0, seqs=4, fleet={"lease_slice": 2, "lease_ttl_s": 0.2})
    down = RespClient("redis://127.0.0.1:1", timeout_s=0.05)
    try:
        fleet.add("proc-x", failure=failure, redis=down)
        await fleet.sync(0)  # never synced: the policy at once
        state = fleet.state(0)
        assert not state.reachable
        if failure == "fail_open":
            assert state.lease is None and fleet.admit(0, "a", 5) == 4  # the pool's limit
        else:
            assert state.lease == 0 and fleet.admit(0, "a", 1) == 0
        view = fleet.schedulers[0].pools["chat"].state.describe()
        assert view is not None and view["redis"] == "unreachable"
    finally:
        await down.aclose()


async def test_a_lease_held_survives_a_short_outage_and_a_redis_restart(
    redis: RespClient,
) -> None:
    fleet = Fleetish(redis, 1, seqs=4, fleet={"lease_slice": 2, "lease_ttl_s": 5})
    await fleet.sync()
    assert fleet.admit(0, "a", 1) == 1
    await fleet.sync()
    assert fleet.state(0).lease == 3
    fleet.fleets[0].redis = RespClient("redis://127.0.0.1:1", timeout_s=0.05)
    try:
        await fleet.sync()
    finally:
        await fleet.fleets[0].redis.aclose()
    assert fleet.state(0).lease == 3  # within the TTL it keeps what it held
    # Redis comes back empty (its keys lost): the lease is granted again from nothing.
    await redis.call("DEL", f"{fleet.config.fleet.key_prefix}chat:leases")
    fleet.fleets[0].redis = redis
    await fleet.sync()
    assert fleet.state(0).reachable and fleet.state(0).lease == 3


async def test_metrics_and_the_queue_view_name_the_process(redis: RespClient) -> None:
    fleet = Fleetish(redis, 2, seqs=8, fleet={"lease_slice": 2})
    await fleet.sync()
    assert fleet.admit(1, "a", 2) == 2
    await fleet.sync(1)
    await fleet.sync(0)
    text = fleet.registries[0].render().decode()
    assert metric_value(text, "fleetgate_scheduling_admitted", pool="chat") == 2  # the fleet's
    assert metric_value(text, "fleetgate_scheduling_admitted_here", process="proc-0") == 0
    assert metric_value(text, "fleetgate_scheduling_lease", pool="chat", process="proc-0") == 2
    view = fleet.state(0).describe()
    assert view is not None and view["process"] == "proc-0"
    assert view["processes"] == {"proc-1": {"in_flight": 2, "lease": 4, "queued": 0}}


def _borrower_and_guarantee(redis: RespClient, **fleet: Any) -> Fleetish:
    """Two processes, a pool of 2: team ``a`` (nominal 1) to borrow, ``b`` (guaranteed 1)."""
    return Fleetish(
        redis,
        2,
        seqs=2,
        fleet={"lease_slice": 2, **fleet},
        preempt_streams_for_claims="borrowers",
        teams={
            "a": {"quota": {"concurrency": {"nominal": 1}}},
            "b": {"guaranteed": 1, "quota": {"concurrency": {"nominal": 1}}},
        },
    )


async def test_a_guarantee_over_the_limit_cancels_a_borrower_stream_of_another_process(
    redis: RespClient,
) -> None:
    fleet = _borrower_and_guarantee(redis)
    await fleet.sync(1)
    s0, s1 = fleet.schedulers
    cancelled: list[Any] = []
    for _ in range(2):  # team a: one within its nominal, one borrowed
        assert fleet.admit(1, "a", 1) == 1
        running = s1.started(fleet.pool(1), policy("a"), FakeOutcome(), False)
        running.abort = cancelled.append
    await fleet.sync(1)
    await fleet.sync(0)
    b = policy("b")
    b = type(b)(b.team, b.band, b.weight, b.reject, b.max_wait_s, b.deadline_s, 1)
    assert s0.try_admit(fleet.pool(0), b, 1)  # within its guarantee: over the pool's limit
    s0.started(fleet.pool(0), b, FakeOutcome(), True)  # a claim: nothing to cancel here
    assert cancelled == []
    await fleet.sync(0)  # the order goes to the process serving the borrower ...
    await fleet.sync(1)
    assert len(cancelled) == 1  # ... which cancels one of a's streams


async def test_owners_back_for_their_share_cancel_borrowers_streams_in_another_process(
    redis: RespClient,
) -> None:
    """Team a borrowed the whole pool in process 1 while b was idle; b's two requests queue
    in process 0: one order cancels two of a's borrowed streams at once (not one a second),
    and the slots they free go to b, not to a's own queued request in process 1."""
    quota = {"quota": {"concurrency": {"nominal": 2}}}
    fleet = Fleetish(
        redis,
        2,
        seqs=4,
        fleet={"lease_slice": 1},
        preempt_streams_for_claims="borrowers",
        teams={"a": quota, "b": quota},
    )
    await fleet.sync()
    s0, s1 = fleet.schedulers
    p0, p1 = fleet.pool(0), fleet.pool(1)
    cancelled: list[Any] = []
    streams = []
    for _ in range(4):
        for _ in range(6):
            if fleet.admit(1, "a", 1):
                running = s1.started(p1, policy("a"), FakeOutcome(), False)
                running.abort = cancelled.append
                streams.append(running)
                break
            await fleet.sync(1)  # at contention process 0 hands its spare slot back
            await fleet.sync(0)
    assert len(streams) == 4 and p1.state.own == 4
    a_queued = asyncio.ensure_future(s1.wait(p1, policy("a"), 1, 0.0))
    await fleet.sync(1)
    await fleet.sync(0)
    b_waiting = [asyncio.ensure_future(s0.wait(p0, policy("b"), 1, 0.0)) for _ in range(2)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in b_waiting)
    await fleet.sync(0)  # b's process: one order for both ...
    await fleet.sync(1)  # ... a's process cancels two borrowed streams at once
    assert len(cancelled) == 2 and {c.code for c in cancelled} == {"preempted_in_flight"}
    await fleet.sync(0)  # a second sync sends nothing more (both on their way)
    await fleet.sync(1)
    assert len(cancelled) == 2
    for running in streams:
        if running.cancel is not None:
            s1.finish(p1, running, 0, None)
    for _ in range(4):
        await fleet.sync(1)
        await fleet.sync(0)
    await asyncio.wait_for(asyncio.gather(*b_waiting), 1.0)
    assert not a_queued.done(), "a borrower took a slot an owner elsewhere was waiting for"
    assert p0.teams == {"a": 2, "b": 2} and p0.admitted == 4
    a_queued.cancel()
    await asyncio.gather(a_queued, return_exceptions=True)


async def test_the_critical_reserve_is_held_while_critical_requests_arrive_at_any_process(
    redis: RespClient,
) -> None:
    """``critical_reserve_hold_s``: a critical request arriving at process 1 holds the
    reserve in process 0 too (as of the next sync), for the hold time, and no longer."""
    fleet = Fleetish(
        redis, 2, seqs=8, fleet={"lease_slice": 2}, critical_reserve=0.5, critical_reserve_hold_s=5
    )
    await fleet.sync()
    s0, p0 = fleet.schedulers[0], fleet.pool(0)
    s0.upkeep(p0)
    assert p0.reserve == 0.0  # no critical request anywhere: free for everyone
    assert fleet.admit(1, "oncall", 1, band="critical") == 1
    await fleet.sync(1)
    await fleet.sync(0)
    s0.upkeep(p0)
    assert p0.reserve == 0.5  # held here for the critical requests arriving elsewhere
    for clock in fleet.clocks:
        clock.now += 6
    await fleet.sync(1)
    await fleet.sync(0)
    s0.upkeep(p0)
    assert p0.reserve == 0.0  # the hold time passed everywhere


async def test_every_process_reads_the_fleets_scheduling_decisions(redis: RespClient) -> None:
    """Each process's decisions reach the capped stream at its next sync; any process reads
    them all, newest first, filtered by team."""
    fleet = Fleetish(redis, 2, seqs=2, fleet={"lease_slice": 1})
    await fleet.sync()
    for i, team in ((0, "a"), (1, "b"), (1, "a")):
        recorder = fleet.schedulers[i].admission.recorder
        recorder.decide(fleet.pool(i), policy(team), 10, "admitted", 0.25, None, 0)
    assert await fleet.fleets[0].recent_decisions(10) == []  # not synced yet
    await fleet.sync()
    found = await fleet.fleets[0].recent_decisions(10)
    assert [(d["tenant"], d["admission"]["process"]) for d in found] == [
        ("a", "proc-1"),
        ("b", "proc-1"),
        ("a", "proc-0"),
    ]
    assert found[0]["strategy"] == "scheduling" and found[0]["admission"]["wait_s"] == 0.25
    only_a = await fleet.fleets[1].recent_decisions(10, tenant="a")
    assert [d["admission"]["process"] for d in only_a] == ["proc-1", "proc-0"]
    assert len(await fleet.fleets[1].recent_decisions(1)) == 1


@pytest.mark.parametrize(("left", "foreseen", "cut"), [(1, True, 0), (3, True, 1), (1, False, 0)])
async def test_a_claim_waits_for_a_stream_another_process_foresees_ending(
    redis: RespClient, left: int, foreseen: bool, cut: int
) -> None:
    """A borrower's stream in process 1, ``left`` chunks from its ``max_tokens`` at its pace,
    is published at the sync; with ``foreseen_ends`` a claim over the limit in process 0 counts
    one that ends within a step as its slot on its way and cuts nothing (one further away, or
    without the setting: the order as before)."""
    fleet = _borrower_and_guarantee(redis, foreseen_ends=foreseen)
    await fleet.sync(1)
    s0, s1 = fleet.schedulers
    cancelled: list[Any] = []
    outcomes = [FakeOutcome(relayed=1), FakeOutcome(relayed=1)]
    for outcome in outcomes:  # team a: one within its nominal, one borrowed
        assert fleet.admit(1, "a", 1) == 1
        running = s1.started(fleet.pool(1), policy("a"), outcome, False, max_tokens=24)
        running.abort = cancelled.append
    await fleet.sync(1)  # the first sight of their output starts their pace
    step = 0.02
    for outcome in outcomes:
        outcome.relayed = 24 - left
    fleet.clocks[1].now += step * (23 - left)
    await fleet.sync(1)  # published: about to end at its pace of one chunk per 20 ms
    await fleet.sync(0)
    assert (fleet.state(0).foreseen_end() is not None) is (left == 1 and foreseen)
    b = policy("b")
    b = type(b)(b.team, b.band, b.weight, b.reject, b.max_wait_s, b.deadline_s, 1)
    assert s0.try_admit(fleet.pool(0), b, 1)  # within its guarantee: over the pool's limit
    claim = s0.started(fleet.pool(0), b, FakeOutcome(), True)
    await fleet.sync(0)
    await fleet.sync(1)
    assert len(cancelled) == cut
    # without the setting the end is not counted here: an order goes out (and the process
    # whose stream is about to end cuts one fewer, `obey_order`)
    assert bool(fleet.state(0)._ordered) is not (foreseen and left == 1)
    if (
        foreseen and left == 1
    ):  # it waits for that end; with no output once the slot should have been
        assert claim.awaits > 0  # its (another claim took it), it cuts after all
        jump = claim.awaits + 0.001 - fleet.clocks[0].now
        fleet.clocks[0].now += jump  # (both clocks move: what process 1 published ages)
        fleet.state(0)._wall = lambda: time.time() + jump
        await fleet.sync(0)  # overdue: the end it counted on is past, it has no output:
        assert claim.awaits == 0  # it asks the process serving a borrower for a cut, sent
        assert fleet.state(0)._order is not None  # at the next sync (that process, one whose
        await fleet.sync(0)  # streams are about to end, cuts one fewer: `obey_order`)
        assert fleet.state(0)._order is None and fleet.state(0)._ordered


async def test_a_foreseen_end_ages_on_the_shared_clock_and_passes(redis: RespClient) -> None:
    """What another process published is aged by the wall clock between its sync and this
    one's, and an end already past (or more than a step away) is not on its way."""
    fleet = Fleetish(redis, 2, seqs=4, fleet={"foreseen_ends": True})
    s1 = fleet.schedulers[1]
    await fleet.sync(1)
    assert fleet.admit(1, "a", 1) == 1
    outcome = FakeOutcome(relayed=1)
    s1.started(fleet.pool(1), policy("a"), outcome, False, max_tokens=10)
    await fleet.sync(1)
    outcome.relayed = 9  # one chunk left, 8 chunks in 0.4 s: 50 ms a chunk, ends in ~25 ms
    fleet.clocks[1].now += 0.4
    await fleet.sync(1)
    await fleet.sync(0)
    state = fleet.state(0)
    assert state.foreseen_end() is not None
    fleet.clocks[0].now += 0.03  # past the foreseen end: its slot is taken by now
    assert state.foreseen_end() is None
    fleet.clocks[0].now -= 0.03
    state._wall = lambda: time.time() + 0.03  # read 30 ms after it was written
    await fleet.sync(0)
    assert state.foreseen_end() is None


async def test_a_guarantee_over_this_process_s_lease_cuts_here_though_the_view_is_a_sync_old(
    redis: RespClient,
) -> None:
    """The leases add up to the pool's limit: a guarantee that starts over this process's
    lease takes the fleet over the limit as soon as the others have filled theirs, though
    its view of their counts (a sync old) still shows a free slot. It cuts a borrower's
    stream here at once (the engines would otherwise hold one more than the limit until the
    next sync)."""
    fleet = Fleetish(
        redis, 2, seqs=4, fleet={"lease_slice": 1}, preempt_streams_for_claims="borrowers",
        teams={"b": {"guaranteed": 2}},  # one per process
    )  # fmt: skip
    await fleet.sync()
    s0, s1 = fleet.schedulers
    p0, p1 = fleet.pool(0), fleet.pool(1)
    cancelled: list[Any] = []
    for _ in range(4):  # team a (no quota: a borrower) fills what the leases allow
        for i, (s, p) in enumerate(((s0, p0), (s1, p1))):
            if fleet.admit(i, "a", 1):
                s.started(p, policy("a"), FakeOutcome(), False).abort = cancelled.append
            await fleet.sync(i)
    assert [fleet.state(i).lease for i in (0, 1)] == [2, 2]
    assert p0.admitted == p1.admitted == 4, (p0.admitted, p1.admitted)
    s0.release(p0, policy("a"), 0, 0.1)  # one of process 0's ends; both views see it ...
    p0.running.popitem()
    await fleet.sync(0)
    await fleet.sync(1)
    assert p1.admitted == 3
    assert fleet.admit(0, "a", 1) == 1  # ... and process 0 fills it after that sync
    assert p1.admitted == 3  # process 1's view: one slot free still
    b = policy("b")
    b = type(b)(b.team, b.band, b.weight, b.reject, b.max_wait_s, b.deadline_s, 2)
    before = len(cancelled)
    assert s1.try_admit(p1, b, 1)  # within its guarantee, over its own lease
    assert p1.admitted == 4 and p1.over_limit() == 1  # the view at the limit, the lease past
    claim = s1.started(p1, b, FakeOutcome(), True)
    assert len(cancelled) == before + 1 and claim.cut is not None  # cut here, at once
    assert claim.cut in p1.running and claim.cut.cancel is not None
