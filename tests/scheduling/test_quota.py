"""Quotas: org -> team nominal shares, borrowing and lending limits, reclaim by the owner;
in-flight cancellation; output charged as it streams; admissions in the decision log."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import ValidationError

from fleetgate.routing.decisions import DecisionLog
from fleetgate.scheduling.config import SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.pool import Pool, Running
from fleetgate.scheduling.quota import BORROWING, CAPPED, UNDER, QuotaTree
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.telemetry.registry import Registry
from tests.scheduling.support import Clock, FakeOutcome, NoRoutes, policy


def _scheduler(
    capacity: int | None, clock: Clock | None = None, **config: Any
) -> tuple[Scheduler, Pool, Registry, DecisionLog]:
    registry = Registry()
    section = SchedulingConfig.model_validate(config)
    table: Any = NoRoutes()
    decisions = DecisionLog(registry)
    scheduler = Scheduler(
        section,
        lambda: table,
        SchedulingMetrics(registry),
        clock=clock or Clock(),
        decisions=decisions,
    )
    pool = scheduler.pools["p"] = Pool("p", capacity, 0.0)
    if section.has_quotas:
        pool.quotas = QuotaTree(section, scheduler._clock)
    return scheduler, pool, registry, decisions


async def _settle() -> None:
    """Let the tasks woken by an admission run."""
    for _ in range(5):
        await asyncio.sleep(0)


def _teams(**quotas: Any) -> dict[str, Any]:
    return {team: {"quota": {"concurrency": q}} for team, q in quotas.items()}


async def _queue(scheduler: Scheduler, pool: Pool, team: str, band: str = "interactive") -> Any:
    p = policy(team, band)  # type: ignore[arg-type]
    if scheduler.try_admit(pool, p, 10):
        return None
    task = asyncio.create_task(scheduler.wait(pool, p, 10, 0.0))
    await _settle()
    return task


def test_status_follows_nominal_and_borrowing_limit() -> None:
    config = SchedulingConfig.model_validate(
        {"teams": _teams(a={"nominal": 2, "borrowing_limit": 1})}
    )
    tree = QuotaTree(config, Clock())
    assert tree.status("a") == UNDER
    tree.take("a")
    assert tree.status("a") == UNDER  # the second of its two
    tree.take("a")
    assert tree.status("a") == BORROWING  # a third borrows
    tree.take("a")
    assert tree.status("a") == CAPPED  # a fourth would pass nominal + borrowing_limit
    assert tree.status("a", 0) == BORROWING
    assert tree.status("nobody") == BORROWING  # no quota: nominal 0, it only borrows


def test_an_org_bounds_its_teams_together() -> None:
    config = SchedulingConfig.model_validate(
        {
            "orgs": {"x": {"quota": {"concurrency": {"nominal": 2, "borrowing_limit": 0}}}},
            "teams": {"x1": {"org": "x"}, "x2": {"org": "x"}},
        }
    )
    tree = QuotaTree(config, Clock())
    tree.take("x1")
    tree.take("x1")
    assert tree.status("x2") == CAPPED  # the org's two are taken by x1
    tree.give_back("x1")
    assert tree.status("x2") == UNDER


def test_config_checks_orgs_and_lending() -> None:
    with pytest.raises(ValidationError):
        SchedulingConfig.model_validate({"teams": {"a": {"org": "missing"}}})
    with pytest.raises(ValidationError):
        SchedulingConfig.model_validate({"teams": _teams(a={"nominal": 1, "lending_limit": 2})})
    assert not SchedulingConfig().has_quotas


async def test_a_borrowing_team_gives_capacity_back_when_the_owner_arrives() -> None:
    """b fills the whole pool (borrowing a's idle share); a arrives: every slot b frees goes
    to a until a holds its nominal 2, though b queued first and has the smaller counter."""
    scheduler, pool, _, _ = _scheduler(4, teams=_teams(a={"nominal": 2}, b={"nominal": 2}))
    b = policy("b")
    for _ in range(4):
        assert scheduler.try_admit(pool, b, 10)  # a is idle: b borrows its two
    b_waiting = [await _queue(scheduler, pool, "b") for _ in range(2)]
    a_waiting = [await _queue(scheduler, pool, "a") for _ in range(3)]
    pool.vtc.counters["a"] = 1e9  # even with a far larger counter, the owner goes first
    scheduler.release(pool, b, 5, 0.1)
    scheduler.release(pool, b, 5, 0.1)
    await _settle()
    assert pool.teams == {"a": 2, "b": 2}
    assert all(t.done() for t in a_waiting[:2]) and not any(t.done() for t in b_waiting)
    # a holds its nominal: now both borrow, by counter (b's is smaller).
    scheduler.release(pool, b, 5, 0.1)
    await _settle()
    assert b_waiting[0].done() and not a_waiting[2].done()
    for t in (*b_waiting, *a_waiting):
        t.cancel()


async def test_borrowing_limit_holds_a_team_back_on_an_idle_pool() -> None:
    scheduler, pool, _, _ = _scheduler(10, teams=_teams(b={"nominal": 1, "borrowing_limit": 1}))
    b = policy("b")
    assert scheduler.try_admit(pool, b, 1) and scheduler.try_admit(pool, b, 1)
    assert not scheduler.try_admit(pool, b, 1)  # 8 slots free, but b may not borrow more
    other = policy("c")
    assert scheduler.try_admit(pool, other, 1)  # nobody queued: c is not held back by b
    task = await _queue(scheduler, pool, "b")
    assert task is not None and not task.done()
    scheduler.release(pool, b, 1, 0.1)
    await _settle()
    assert task.done() and pool.teams["b"] == 2


async def test_lending_limit_keeps_the_unlent_share_free_while_its_owner_is_idle() -> None:
    scheduler, pool, _, _ = _scheduler(
        4, teams=_teams(a={"nominal": 3, "lending_limit": 1}, b={"nominal": 1})
    )
    b = policy("b")
    assert scheduler.try_admit(pool, b, 1) and scheduler.try_admit(pool, b, 1)
    assert not scheduler.try_admit(pool, b, 1)  # 2 of a's 3 are never lent
    assert not scheduler.idle("p")  # the batch lane sees no idle capacity either
    a = policy("a")
    assert scheduler.try_admit(pool, a, 1) and scheduler.try_admit(pool, a, 1)
    assert not scheduler.try_admit(pool, a, 1)  # the pool is full now


async def test_tokens_per_second_quota_holds_back_until_the_rate_falls() -> None:
    clock = Clock()
    scheduler, pool, _, _ = _scheduler(
        None,
        clock,
        rate_window_s=10,
        teams={"a": {"quota": {"tokens_per_s": {"nominal": 100, "borrowing_limit": 50}}}},
    )
    a = policy("a")
    assert scheduler.try_admit(pool, a, 1000)  # 1000 tokens over a 10 s window: 100/s
    assert pool.quotas is not None and pool.quotas.status("a") == BORROWING
    scheduler.release(pool, a, 600, 0.5)  # 160/s: past 100 + 50
    assert pool.quotas.status("a") == CAPPED
    assert not scheduler.try_admit(pool, a, 10)
    task = asyncio.create_task(scheduler.wait(pool, a, 10, 0.0))
    await _settle()
    assert not task.done()
    clock.now += 5  # 160 * e^-0.5 = 97/s
    scheduler.upkeep(pool)
    await _settle()
    assert task.done() and task.exception() is None


async def test_output_is_charged_as_the_stream_goes_when_anyone_waits() -> None:
    scheduler, pool, _, _ = _scheduler(1)
    a = policy("a")
    assert scheduler.try_admit(pool, a, 10)
    out = FakeOutcome()
    running = scheduler.started(pool, a, out, within=False)
    waiting = await _queue(scheduler, pool, "b")
    out.relayed = 40
    scheduler.upkeep(pool)
    assert pool.vtc.value("a") == 50 and running.charged == 40
    scheduler.finish(pool, running, 55, 0.3)  # only the 15 not charged yet
    assert pool.vtc.value("a") == 65 and not pool.running
    await _settle()
    assert waiting.done()


async def test_a_starved_higher_band_cancels_the_newest_lower_band_stream() -> None:
    clock = Clock()
    scheduler, pool, registry, decisions = _scheduler(2, clock, preempt_in_flight_after_s=0.5)
    batch = policy("etl", "batch")
    runs: list[Running] = []
    for _ in range(2):
        assert scheduler.try_admit(pool, batch, 10)
        runs.append(scheduler.started(pool, batch, FakeOutcome(), within=False))
    assert all(r.cancellable for r in runs)
    waiting = await _queue(scheduler, pool, "oncall", "critical")
    scheduler.upkeep(pool)
    assert all(r.cancel is None for r in runs)  # not starved long enough yet
    clock.now += 0.6
    scheduler.upkeep(pool)
    assert runs[0].cancel is None and runs[1].cancel is not None  # the newest
    assert runs[1].cancel.code == "preempted_in_flight" and runs[1].cancel.status == 503
    scheduler.upkeep(pool)
    assert runs[0].cancel is None  # one cancellation at a time
    scheduler.finish(pool, runs[1], 3, 0.2)  # the relay ended it: its slot goes to critical
    await _settle()
    assert waiting.done() and waiting.exception() is None
    text = registry.render().decode()
    assert (
        'fleetgate_scheduling_preemptions_total{pool="p",band="batch",by_band="critical"} 1' in text
    )
    reasons = [d.reason for d in decisions.query()]
    assert "preempted_in_flight" in reasons and "admitted" in reasons


async def test_critical_streams_are_never_cancelled_and_same_band_is_not_preempted() -> None:
    clock = Clock()
    scheduler, pool, _, _ = _scheduler(1, clock, preempt_in_flight_after_s=0)
    a = policy("a")
    assert scheduler.try_admit(pool, a, 10)
    run = scheduler.started(pool, a, FakeOutcome(), within=False)
    waiting = await _queue(scheduler, pool, "b")  # same band, no quotas: waits its turn
    clock.now += 1
    scheduler.upkeep(pool)
    assert run.cancel is None
    crit = scheduler.started(pool, policy("c", "critical"), FakeOutcome(), within=False)
    assert not crit.cancellable
    waiting.cancel()


async def test_the_owner_reclaims_by_cancelling_a_borrowers_stream() -> None:
    clock = Clock()
    scheduler, pool, _, _ = _scheduler(
        2, clock, preempt_in_flight_after_s=0, teams=_teams(a={"nominal": 1}, b={"nominal": 1})
    )
    b = policy("b")
    runs = []
    for _ in range(2):
        assert scheduler.try_admit(pool, b, 10)
        runs.append(scheduler.started(pool, b, FakeOutcome(), within=False))
    waiting = await _queue(scheduler, pool, "a")  # same band, but under its nominal
    clock.now += 0.01
    scheduler.upkeep(pool)
    assert runs[1].cancel is not None and runs[0].cancel is None
    scheduler.finish(pool, runs[1], 0, 0.1)
    await _settle()
    assert waiting.done() and pool.teams == {"a": 1, "b": 1}
    # Now b is within its own nominal: a second request of a may not take it back.
    again = await _queue(scheduler, pool, "a")
    clock.now += 1
    scheduler.upkeep(pool)
    assert runs[0].cancel is None
    again.cancel()


async def test_each_queued_request_is_in_the_decision_log_fast_path_ones_are_not() -> None:
    scheduler, pool, _, decisions = _scheduler(
        1,
        time.monotonic,
        teams=_teams(a={"nominal": 1}),  # type: ignore[arg-type]
    )
    a = policy("a")
    assert scheduler.try_admit(pool, a, 10)
    assert len(decisions) == 0
    quick = policy("b", max_wait_s=0.01)
    with pytest.raises(Exception) as err:
        await scheduler.wait(pool, quick, 7, 0.0)
    assert getattr(err.value, "code", None) == "queue_timeout"
    waiting = await _queue(scheduler, pool, "c", "batch")
    scheduler.release(pool, a, 1, 0.1)
    await waiting
    shed, admitted = (
        decisions.query(alias="p", reason="queue_timeout")[0],
        decisions.query(reason="admitted")[0],
    )
    assert shed.strategy == "scheduling" and shed.tenant == "b" and shed.prompt_tokens == 7
    assert shed.admission is not None and shed.admission["band"] == "interactive"
    assert shed.admission["wait_s"] >= 0.01 and shed.admission["quota"] == "borrowing"
    assert admitted.admission is not None and admitted.admission["band"] == "batch"
    assert admitted.admission["queued_ahead"] == 0 and admitted.picked == "p"
    assert decisions.hit_ratio("p") is None  # admissions are not prefix-cache picks
    scheduler.try_admit(pool, a, 1)
    gone = await _queue(scheduler, pool, "d")
    gone.cancel()
    await _settle()
    assert decisions.query(reason="abandoned")[0].tenant == "d"


def test_the_queue_view_shows_quota_usage_a_team_admin_only_its_own() -> None:
    from fleetgate.scheduling.admin_routes import pool_view

    scheduler, pool, _, _ = _scheduler(
        4,
        teams={"a": {"org": "x", "quota": {"concurrency": {"nominal": 2}}}, "b": {"org": "x"}},
        orgs={"x": {"quota": {"tokens_per_s": {"nominal": 1000}}}},
    )
    assert scheduler.try_admit(pool, policy("a"), 500)
    view = pool_view(pool, None, 0.0)
    assert view["quotas"]["team:a"]["in_flight"] == 1
    assert view["quotas"]["org:x"]["in_flight"] == 1
    assert view["quotas"]["org:x"]["tokens_per_s"] == 50.0  # 500 tokens over a 10 s window
    assert set(pool_view(pool, "b", 0.0)["quotas"]) == {"team:b", "org:x"}


def test_a_request_within_its_nominal_gets_the_owners_engine_priority() -> None:
    from fleetgate.scheduling.stage import engine_priority

    scheduler, pool, _, _ = _scheduler(8, teams=_teams(a={"nominal": 1}))
    a, b = policy("a"), policy("b")
    assert scheduler.within(pool, a) and not scheduler.within(pool, b)
    assert scheduler.try_admit(pool, a, 1)
    assert not scheduler.within(pool, a)  # its second request borrows
    assert engine_priority(1, True) < engine_priority(1, False)
