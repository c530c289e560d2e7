"""Saturation: capacity from max_num_seqs, engine signals, the limit following them."""

from __future__ import annotations

import time
from typing import Any

from fleetgate.config.schema import DeploymentConfig
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_metrics import EngineSnapshot
from fleetgate.scheduling.config import HighWater
from fleetgate.scheduling.pool import (
    ENDING_CHUNKS,
    Pool,
    Running,
    capacity_of,
    engines_saturated,
    time_to_end,
)
from tests.scheduling.support import FakeOutcome, policy


def _dep(name: str, seqs: int | None = None) -> Deployment:
    config = DeploymentConfig.model_validate(
        {"model": "m", "api_base": f"http://127.0.0.1:9/{name}", "name": name,
         "max_num_seqs": seqs}
    )  # fmt: skip
    provider: Any = None
    return Deployment(name, "alias", config, provider)


def test_capacity_is_the_sum_of_the_healthy_deployments() -> None:
    a, b = _dep("a", 8), _dep("b", 4)
    now = time.monotonic()
    assert capacity_of([a, b], now) == 12
    b.state.cooldown_until = now + 30
    assert capacity_of([a, b], now) == 8
    a.state.cooldown_until = now + 30
    assert capacity_of([a, b], now) == 12  # none healthy: the dispatcher answers at once
    assert capacity_of([_dep("c", 8), _dep("d")], now) is None
    assert capacity_of([], now) is None  # no deployment (a pool with no ready pod): no wait


def test_engine_waiting_adds_its_requests_per_healthy_deployment() -> None:
    a, b = _dep("a", 8), _dep("b", 4)
    now = time.monotonic()
    assert capacity_of([a, b], now, waiting=1) == 14
    b.state.cooldown_until = now + 30
    assert capacity_of([a, b], now, waiting=2) == 10
    assert capacity_of([_dep("c", 8), _dep("d")], now, waiting=1) is None


def test_engine_signals_need_every_reading_over_a_mark() -> None:
    a, b = _dep("a"), _dep("b")
    snaps = {"a": EngineSnapshot("vllm", waiting=9, kv_usage=0.5),
             "b": EngineSnapshot("vllm", waiting=1, kv_usage=0.5)}  # fmt: skip

    def of(dep: Deployment) -> EngineSnapshot | None:
        return snaps.get(dep.id)

    queue = HighWater(engine_queue=4)
    assert not engines_saturated([a, b], queue, of)
    snaps["b"] = EngineSnapshot("vllm", waiting=5, kv_usage=0.5)
    assert engines_saturated([a, b], queue, of)
    assert not engines_saturated([a, b], HighWater(), of)  # no marks: never
    assert engines_saturated([a, b], HighWater(kv_usage=0.5), of)
    del snaps["b"]  # b not scraped: judged by a alone
    assert engines_saturated([a, b], queue, of)
    assert not engines_saturated([a, b], queue, None)  # nothing to judge by


def test_ttft_signal_reads_the_deployments_ewma() -> None:
    a = _dep("a")
    marks = HighWater(ttft_s=0.5)
    assert not engines_saturated([a], marks, None)
    a.state.observe_ttft(0.8)
    assert engines_saturated([a], marks, None)


def test_the_limit_holds_what_was_in_flight_at_the_onset_and_grows_back() -> None:
    pool = Pool("p", 20, 0.0)
    pool.admitted = 12
    pool.follow(20, signal=True)
    assert pool.limit == 12 and pool.saturated
    pool.admitted = 3
    pool.follow(20, signal=True)
    assert pool.limit == 12  # held while saturated, not ratcheted down
    pool.follow(20, signal=False)
    assert pool.limit == 15
    for _ in range(5):
        pool.follow(20, signal=False)
    assert pool.limit == 20  # never above capacity


def test_without_capacity_the_limit_goes_back_to_unbounded() -> None:
    pool = Pool("p", None, 0.0)
    pool.admitted = 4
    pool.follow(None, signal=True)
    assert pool.limit == 4
    pool.follow(None, signal=False)
    assert pool.limit is None  # nothing queued: unbounded


def test_estimated_wait_uses_the_queue_ahead_and_the_service_time() -> None:
    pool = Pool("p", 4, 0.0)
    assert pool.estimated_wait(1) is None
    pool.observe_service(2.0)
    assert pool.estimated_wait(1) == 0.5


def test_time_to_end_foresees_a_stream_near_its_max_tokens_by_its_own_pace() -> None:
    outcome = FakeOutcome()
    running = Running(policy("a"), outcome, True, 1, False, max_tokens=20)
    assert time_to_end(running, 10.0) is None  # no output yet
    outcome.relayed = 2
    assert time_to_end(running, 10.0) is None  # first sight: its pace starts here
    outcome.relayed = 20 - ENDING_CHUNKS - 1
    assert time_to_end(running, 10.0 + 0.05 * 15) is None  # 4 chunks left: further
    outcome.relayed = 19
    end = time_to_end(running, 10.0 + 0.05 * 17)
    assert end is not None
    seconds, step = end
    assert abs(step - 0.05) < 1e-9 and abs(seconds - 0.025) < 1e-9  # half a chunk on average
    outcome.settled = True  # complete: it ends on its own, not foreseen
    assert time_to_end(running, 11.0) is None
    unknown = Running(policy("a"), FakeOutcome(relayed=5), True, 2, False)
    assert time_to_end(unknown, 10.0) is None and time_to_end(unknown, 11.0) is None
