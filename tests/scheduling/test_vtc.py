"""Virtual token counters: the fair-share bound between backlogged teams, weights, lifting."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.scheduling.queue import AdmissionQueue, Waiter
from fleetgate.scheduling.vtc import VirtualTokenCounters
from tests.scheduling.support import policy, scheduler_with_pool

MAX_IN, MAX_OUT = 400, 300


async def _run_backlogged(
    capacity: int, sizes: list[tuple[str, int, int]], seed: int
) -> tuple[float, float, int]:
    """Two teams' requests (arriving in the order given) through one pool of ``capacity``;
    requests end in a random order. Returns the largest gap between the teams' counters and
    between their tokens served (since both were queued), while both had requests queued, and
    how many points were checked."""
    scheduler, pool, _ = scheduler_with_pool(capacity, max_queue=10_000)
    policies = {"a": policy("a", max_wait_s=3600), "b": policy("b", max_wait_s=3600)}
    served = {"a": 0.0, "b": 0.0}
    running: list[tuple[str, int]] = []

    async def request(team: str, tokens_in: int, tokens_out: int) -> None:
        if not scheduler.try_admit(pool, policies[team], tokens_in):
            await scheduler.wait(pool, policies[team], tokens_in, 0.0)
        served[team] += tokens_in
        running.append((team, tokens_out))

    tasks = []
    for team, tokens_in, tokens_out in sizes:
        tasks.append(asyncio.create_task(request(team, tokens_in, tokens_out)))
        await asyncio.sleep(0)
    rng = random.Random(seed)
    worst_counter = worst_served = 0.0
    checked = 0
    base: dict[str, float] | None = None
    while running:
        team, tokens_out = running.pop(rng.randrange(len(running)))
        scheduler.release(pool, policies[team], tokens_out, 0.01)
        served[team] += tokens_out
        for _ in range(3):
            await asyncio.sleep(0)
        queued = pool.queue.teams()
        if queued.get("a") and queued.get("b"):
            if base is None:
                base = dict(served)
            gap = abs(pool.vtc.value("a") - pool.vtc.value("b"))
            worst_counter = max(worst_counter, gap)
            delta = abs((served["a"] - base["a"]) - (served["b"] - base["b"]))
            worst_served = max(worst_served, delta)
            checked += 1
    await asyncio.gather(*tasks)
    return worst_counter, worst_served, checked


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 8),
    sizes=st.lists(
        st.tuples(st.sampled_from("ab"), st.integers(1, MAX_IN), st.integers(0, MAX_OUT)),
        min_size=2,
        max_size=120,
    ),
    seed=st.integers(0, 2**16),
)
def test_backlogged_teams_stay_within_the_vtc_bound(
    capacity: int, sizes: list[tuple[str, int, int]], seed: int
) -> None:
    # Input is charged at admission (at most one request's at a time), output at the end: at
    # most `capacity` requests of one team end before the other is admitted again.
    bound = MAX_IN + capacity * MAX_OUT
    counter_gap, served_gap, _ = asyncio.run(_run_backlogged(capacity, sizes, seed))
    assert counter_gap <= bound
    assert served_gap <= 2 * bound


def test_a_flooding_team_gets_no_more_than_a_steady_one_while_both_wait() -> None:
    # a sends 5x as many requests, all queued from the start: admissions alternate by service
    sizes = [("a", 100, 100)] * 100 + [("b", 100, 100)] * 20
    counter_gap, served_gap, checked = asyncio.run(_run_backlogged(4, sizes, 1))
    assert checked > 10
    assert counter_gap <= 100 + 4 * 100
    assert served_gap <= 2 * (100 + 4 * 100)


def test_the_check_fails_for_a_scheduler_that_is_not_fair(monkeypatch: Any) -> None:
    # FIFO by arrival (the oldest head of any team first): the flooding team takes the pool
    def oldest_first(self: AdmissionQueue) -> Waiter | None:
        band = self._bands[1]
        if not band:
            return None
        team = min(band, key=lambda t: band[t][0].seq)
        return self._take(band, team, 0)

    monkeypatch.setattr(AdmissionQueue, "pop", oldest_first)
    monkeypatch.setattr(
        AdmissionQueue, "peek", lambda self: self.waiters()[0] if self.size else None
    )
    sizes = [("a", 100, 100)] * 100 + [("b", 100, 100)] * 20
    _, served_gap, _ = asyncio.run(_run_backlogged(4, sizes, 1))
    assert served_gap > 2 * (100 + 4 * 100)


def test_weights_share_service_in_proportion() -> None:
    counters = VirtualTokenCounters()
    served = {"a": 0, "b": 0}
    weights = {"a": 2.0, "b": 1.0}
    for _ in range(300):
        team = counters.fairest(["a", "b"])
        counters.charge(team, 10, weights[team])
        served[team] += 10
    assert 1.9 <= served["a"] / served["b"] <= 2.1


def test_a_newly_queued_team_is_lifted_to_the_least_of_the_queued() -> None:
    counters = VirtualTokenCounters()
    counters.charge("a", 500)
    counters.charge("b", 800)
    counters.activate("c", backlogged=["a", "b"])
    assert counters.value("c") == 500  # no credit banked while idle
    counters.charge("d", 900)
    counters.activate("d", backlogged=["a"])
    assert counters.value("d") == 900  # never lowered


def test_with_nobody_queued_a_team_is_lifted_to_the_team_served_last() -> None:
    counters = VirtualTokenCounters()
    counters.charge("a", 300)
    assert counters.fairest(["a"]) == "a"
    counters.activate("b", backlogged=[])
    assert counters.value("b") == 300


def test_forget_keeps_the_queued_teams() -> None:
    counters = VirtualTokenCounters()
    for team in "abc":
        counters.charge(team, 10)
    counters.forget(["b"])
    assert set(counters.counters) == {"b"}


def test_policy_of_a_weighted_team_counts_its_tokens_divided_by_the_weight() -> None:
    scheduler, pool, _ = scheduler_with_pool(None)
    assert scheduler.try_admit(pool, policy("a", weight=4.0), 400)
    assert pool.vtc.value("a") == 100
