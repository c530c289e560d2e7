"""The planner reproduces the 1M-DAU worked example, with its rounding explicit."""

from __future__ import annotations

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.plan import PlanInputs, make_plan

WORKED = dict(
    dau=1_000_000,
    conversations_per_user=3,
    turns_per_conversation=5,
    active_hours=8,
    peak_factor=3,
    input_tokens=2000,
    output_tokens=500,
    gpu_tokens_per_s=4000,
    gpu_price_per_hour=3.0,
)


def test_worked_example_exact_numbers() -> None:
    plan = make_plan(PlanInputs(**WORKED))  # type: ignore[arg-type]
    # 1,000,000 x 3 x 5 = 15,000,000 requests over 8 h = 28,800 s
    assert plan["requests_per_day"] == 15_000_000
    assert plan["qps_avg"] == pytest.approx(520.8333, abs=1e-3)  # "~= 520 QPS"
    assert plan["tokens_per_s_avg"] == pytest.approx(1_302_083.33, abs=0.01)  # "~= 1.3M"
    assert plan["gpus_avg_exact"] == pytest.approx(325.5208, abs=1e-3)  # "~= 325 GPUs"
    assert plan["gpus_peak_exact"] == pytest.approx(976.5625, abs=1e-4)  # "~= 1,000 at 3x"
    # rounded up to whole GPUs by default
    assert plan["gpus_avg"] == 326
    assert plan["gpus_peak"] == 977
    assert plan["qps_peak"] == pytest.approx(1562.5)
    assert plan["cost_month_always_on_usd"] == pytest.approx(977 * 3 * 720)


def test_worked_example_design_rounding_gives_2_16m() -> None:
    # The design rounds 976.6 peak GPUs up to 1,000: a multiple of 100.
    plan = make_plan(PlanInputs(**WORKED, round_gpus_to=100))  # type: ignore[arg-type]
    assert plan["gpus_peak"] == 1000
    assert plan["cost_month_always_on_usd"] == pytest.approx(2_160_000.0)  # 1000 x $3 x 720 h


def test_autoscaled_cost_follows_the_diurnal_profile() -> None:
    plan = make_plan(PlanInputs(**WORKED, autoscale_headroom=1.0))  # type: ignore[arg-type]
    # the 8 active hours: the middle one carries the 3x peak, the other 7 share the rest
    hourly = plan["gpus_by_hour"]
    assert hourly[12] == plan["gpus_peak"] == 977
    rest = 325.5208 * (8 - 3) / 7  # 232.5 GPUs in each other active hour
    assert [hourly[h] for h in (9, 10, 11, 13, 14, 15, 16)] == [233] * 7
    assert hourly.count(1) == 16  # the 1-GPU floor outside the active hours
    assert sum(plan["diurnal_weights"]) == pytest.approx(8)  # still qps_avg over 8 hours
    assert plan["cost_month_autoscaled_usd"] == pytest.approx((977 + 7 * 233 + 16) * 3 * 30)
    assert plan["cost_month_autoscaled_usd"] < plan["cost_month_always_on_usd"]
    assert rest < plan["gpus_avg_exact"] < plan["gpus_peak_exact"]
    peaky = [1.0] * 24
    peaky[12] = 5.0
    p2 = make_plan(PlanInputs(**WORKED, diurnal=peaky, autoscale_headroom=1.0))  # type: ignore[arg-type]
    assert max(p2["gpus_by_hour"]) == p2["gpus_by_hour"][12] == p2["gpus_peak"]


def test_the_autoscaled_curve_reaches_the_peak_it_sizes_for() -> None:
    """The 1M-DAU example as the README runs it: the busiest hour holds the peak fleet (the
    always-on sizing), headroom never takes an hour past it, averages are over the day."""
    plan = make_plan(PlanInputs(**WORKED, round_gpus_to=100))  # type: ignore[arg-type]
    hourly = plan["gpus_by_hour"]
    assert max(hourly) == plan["gpus_peak"] == 1000
    assert sorted(set(hourly)) == [100, 300, 1000]  # floor, 232.5 x 1.2 = 279 -> 300, peak
    assert plan["gpus_day_avg_exact"] == pytest.approx(325.5208 * 8 / 24, abs=1e-3)
    assert plan["gpus_autoscaled_avg"] == pytest.approx(sum(hourly) / 24)
    assert plan["cost_month_autoscaled_usd"] == pytest.approx(sum(hourly) * 3 * 30)
    flat = make_plan(PlanInputs(**{**WORKED, "peak_factor": 1.0}))  # type: ignore[arg-type]
    assert max(flat["gpus_by_hour"]) == flat["gpus_peak"]  # no peak: headroom capped at it


def test_queueing_sizing_meets_the_ttft_target_and_grows_when_it_tightens() -> None:
    loose = make_plan(PlanInputs(**WORKED, ttft_p95_target_ms=1000, base_ttft_p95_ms=200))  # type: ignore[arg-type]
    tight = make_plan(PlanInputs(**WORKED, ttft_p95_target_ms=210, base_ttft_p95_ms=200))  # type: ignore[arg-type]
    lq, tq = loose["queueing"], tight["queueing"]
    assert lq["predicted_ttft_p95_ms"] <= 1000 and tq["predicted_ttft_p95_ms"] <= 210
    assert tq["gpus_for_ttft_p95"] >= lq["gpus_for_ttft_p95"] >= loose["gpus_peak_exact"]


def test_disaggregated_split() -> None:
    plan = make_plan(
        PlanInputs(**WORKED, prefill_tokens_per_s_per_gpu=20_000, decode_tokens_per_s_per_gpu=1_000)  # type: ignore[arg-type]
    )
    d = plan["disaggregated"]
    # peak 1562.5 QPS: 3.125M prefill tok/s / 20k = 156.25; 781,250 decode tok/s / 1k = 781.25
    assert (d["prefill_gpus"], d["decode_gpus"]) == (157, 782)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(InvalidRequest, match="diurnal"):
        make_plan(PlanInputs(**WORKED, diurnal=[1.0] * 23))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="active_hours"):
        make_plan(PlanInputs(**{**WORKED, "active_hours": 30}))  # type: ignore[arg-type]
