"""PD pool sizing: the fewest engines that meet the targets, from measured engine speeds."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fleetgate.cli.main import main
from fleetgate.errors import InvalidRequest
from fleetgate.plan.engine_probe import probe_engine
from fleetgate.plan.pd import (
    EngineSpeed,
    PdWorkload,
    decode_batch,
    prefill_ttft_quantile_s,
    size_pd,
)
from fleetgate.sim import SimConfig, running_sim

SPEED = EngineSpeed(prefill_ms_per_token=0.05, decode_ms_per_step=10.0, decode_batch_factor=0.01)


def test_the_decode_batch_solves_littles_law_with_the_slowing_step() -> None:
    b = decode_batch(SPEED, rate_per_engine=20.0, output_tokens=500)
    assert b == pytest.approx(20.0 * 500 * SPEED.step_ms(b) / 1000.0)
    # past 1 / factor the step grows faster than the batch drains it: no steady state
    assert math.isinf(decode_batch(SPEED, rate_per_engine=21.0, output_tokens=500))


def test_the_pools_are_the_fewest_engines_that_meet_both_targets() -> None:
    work = PdWorkload(rate=20, prompt_tokens=4000, output_tokens=500, ttft_ms=400, itl_ms=12)
    plan = size_pd(work, SPEED)
    d, p = plan["decode_engines"], plan["prefill_engines"]
    assert plan["predicted_itl_ms"] <= 12 and plan["predicted_ttft_ms"] <= 400
    assert plan["total_engines"] == p + d
    # one engine fewer in either pool misses its target
    fewer_d = decode_batch(SPEED, 20 / (d - 1), 500)
    assert math.isinf(fewer_d) or SPEED.step_ms(fewer_d) > 12
    tight = size_pd(
        PdWorkload(rate=20, prompt_tokens=4000, output_tokens=500, ttft_ms=400, itl_ms=12,
                   max_utilization=0.99), SPEED)  # fmt: skip
    assert tight["prefill_engines"] <= p
    # more load, or a cache that serves more of the prompt, moves the pools the right way
    assert size_pd(PdWorkload(40, 4000, 500, ttft_ms=400, itl_ms=12), SPEED)["prefill_engines"] > p
    cached = size_pd(PdWorkload(20, 4000, 500, cached_fraction=0.75, ttft_ms=400, itl_ms=12), SPEED)
    assert cached["prefill_engines"] < p and cached["decode_engines"] == d


def test_a_spread_of_prefill_times_moves_the_tail_not_the_mean() -> None:
    kw: dict[str, Any] = dict(rate=4.0, engines=2, service_s=0.1, fixed_s=0.0, q=0.9)
    alone = prefill_ttft_quantile_s(service_cv=0.0, **kw)
    spread = prefill_ttft_quantile_s(service_cv=1.0, **kw)
    assert 0.1 <= alone < spread  # long prefills are slow and hold up the queue behind them
    assert math.isinf(prefill_ttft_quantile_s(service_cv=0.0, rate=30, engines=2, service_s=0.1,
                                              fixed_s=0, q=0.9))  # fmt: skip


def test_cold_prefills_and_request_overheads_lengthen_the_predicted_ttft() -> None:
    base = PdWorkload(rate=8, prompt_tokens=8192, output_tokens=24, cached_fraction=0.75)
    warm = size_pd(base, SPEED)
    cold = size_pd(PdWorkload(**{**base.__dict__, "cold_fraction": 0.1}), SPEED)
    # a tenth of the prefills are the whole prompt: the mean grows by 30%...
    assert cold["prefill_service_ms"] == pytest.approx(warm["prefill_service_ms"] * 1.3)
    # ...and on the same two engines the p90 by much more (it lands on the cold ones)
    kw: dict[str, Any] = dict(
        rate=8.0, engines=2, service_s=0.1024, service_cv=0.0, fixed_s=0.0, q=0.9
    )
    mixed = prefill_ttft_quantile_s(cold_fraction=0.1, cold_service_s=0.4096, **kw)
    assert mixed > 1.5 * prefill_ttft_quantile_s(**kw)
    slow = EngineSpeed(**{**SPEED.__dict__, "request_overhead_ms": 25.0})
    assert size_pd(base, slow)["predicted_ttft_ms"] == pytest.approx(
        warm["predicted_ttft_ms"] + 50, abs=1
    )  # paid by the prefill request and by the decode request


def test_unreachable_targets_are_said_not_sized() -> None:
    slow_step = size_pd(PdWorkload(5, 1000, 100, itl_ms=9), SPEED)
    assert slow_step["decode_engines"] is None and "ITL" in slow_step["note"]
    # 8k uncached tokens take 410 ms to prefill: a 300 ms TTFT is out of reach
    long = size_pd(PdWorkload(5, 8192, 100, ttft_ms=300), SPEED)
    assert long["prefill_engines"] is None and "unloaded TTFT" in long["note"]
    with pytest.raises(InvalidRequest):
        size_pd(PdWorkload(5, 1000, 100, cached_fraction=1.0), SPEED)


async def test_the_probe_measures_the_simulated_engine() -> None:
    cfg = SimConfig(model="m", prefill_ms_per_token=0.1, decode_ms_per_step=20.0,
                    decode_batch_factor=0.02, max_num_batched_tokens=8192)  # fmt: skip
    async with running_sim(cfg) as url:
        speed = await probe_engine(f"{url}/v1", "m", long_tokens=3000, steps=12, batch=16)
    # wall-clock measurements on a shared box: lower bounds are firm, upper ones loose
    assert 0.1 * 0.8 <= speed.prefill_ms_per_token <= 0.1 * 2
    assert 20 * 0.95 <= speed.decode_ms_per_step <= 20 * 1.6
    assert 0.005 <= speed.decode_batch_factor <= 0.05
    assert 0 < speed.request_overhead_ms < 500


def test_the_cli_prints_the_sizing(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "pd", "--rate", "8", "--prompt-tokens", "8192", "--output-tokens", "24",
            "--cached-fraction", "0.75", "--ttft-ms", "600", "--itl-ms", "15",
            "--prefill-ms-per-token", "0.05", "--decode-ms-per-step", "10"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "prefill engines" in out and "decode engines" in out
    assert main([*args[:3], "0", *args[4:]]) == 2  # rate 0
