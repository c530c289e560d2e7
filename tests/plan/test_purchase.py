"""GPUs per month through make_plan, and the purchase plan's lead time, batches and spot."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.plan import PlanInputs
from fleetgate.plan.forecast import MONTH_H, Forecast
from fleetgate.plan.history import format_hour, parse_hour
from fleetgate.plan.purchase import MonthNeed, PurchasePolicy, monthly_gpus, purchase_plan

START = parse_hour("2026-01-01T00:00:00Z")
BASE = PlanInputs(dau=1, conversations_per_user=1, turns_per_conversation=1,
                  gpu_tokens_per_s=1000.0, redundancy=1.5)  # fmt: skip


def _flat(rate_per_hour: list[float]) -> Forecast:
    req = np.concatenate([np.full(MONTH_H, r) for r in rate_per_hour])
    series = {"a": {"requests": req, "input_tokens": req * 300, "output_tokens": req * 60}}
    return Forecast(START, len(req), series)


def test_monthly_gpus_follow_the_planner() -> None:
    fc = _flat([10_000.0, 20_000.0])
    fc.series["a"]["requests"][5] *= 2  # one peak hour in month 0
    fc.series["a"]["input_tokens"][5] *= 2
    fc.series["a"]["output_tokens"][5] *= 2
    m0, m1 = monthly_gpus(fc, BASE)
    # month 1: 20,000 req/h * 360 tokens / 3600 s = 2,000 tokens/s -> 2 GPUs * 1.5 = 3
    assert m1.gpus_peak == 3
    # month 0 peaks at twice its 1,000 tokens/s: 2 * 1.5 = 3 GPUs at the peak hour
    assert m0.gpus_peak == 3
    assert m0.need_by_hour[5] == 3 and m0.need_by_hour[6] == 2  # ceil(1.5)
    split = monthly_gpus(_flat([20_000.0]), PlanInputs(
        dau=1, conversations_per_user=1, turns_per_conversation=1,
        prefill_tokens_per_s_per_gpu=4000.0, decode_tokens_per_s_per_gpu=200.0))  # fmt: skip
    # prefill 20000*300/3600 = 1,667 tok/s -> 1 GPU; decode 333 tok/s -> 2 GPUs
    assert (split[0].prefill_gpus, split[0].decode_gpus, split[0].gpus_peak) == (1, 2, 3)


def _months(peaks: list[int]) -> list[MonthNeed]:
    return [
        MonthNeed(
            start=START + i * MONTH_H,
            requests=1.0,
            tokens=1.0,
            peak_tokens_per_s=1.0,
            gpus_peak=p,
            need_by_hour=np.full(MONTH_H, float(p)),
        )  # fmt: skip
        for i, p in enumerate(peaks)
    ]


def test_orders_come_a_lead_time_early_in_batches() -> None:
    policy = PurchasePolicy(current_gpus=10, lead_time_weeks=6, batch_size=4, spot_share=0.0)
    plan = purchase_plan(_months([10, 10, 10, 13, 13, 21]), policy, now=START)
    orders = plan["orders"]
    assert [o["gpus"] for o in orders] == [4, 8]  # 3 -> a batch of 4; 21-14=7 -> 8
    assert orders[0]["for_month"] == format_hour(START + 3 * MONTH_H)
    assert orders[0]["order_by"] == format_hour(START + 3 * MONTH_H - 6 * 168)
    assert not any(o["late"] for o in orders)
    assert [r["owned_gpus"] for r in plan["months"]] == [10, 10, 10, 14, 14, 22]
    assert all(r["spot_gpu_hours"] == 0 for r in plan["months"])


def test_late_order_is_flagged_and_spot_covers_until_arrival() -> None:
    policy = PurchasePolicy(current_gpus=2, lead_time_weeks=4, batch_size=2, spot_share=0.0)
    plan = purchase_plan(_months([2, 6]), policy, now=START + MONTH_H - 168)  # a week before
    (order,) = plan["orders"]
    assert order["late"] and order["gpus"] == 4
    assert order["arrives"] == format_hour(START + MONTH_H - 168 + 4 * 168)
    # month 1 needs 6, has 2 until the order arrives three weeks in: 4 spot GPUs for 3 weeks
    assert plan["months"][1]["spot_gpu_hours"] == pytest.approx(4 * 3 * 168)
    assert plan["months"][1]["spot_peak_gpus"] == 4


def test_spot_share_leaves_the_peak_to_spot_and_never_sells() -> None:
    months = _months([10, 20, 5])
    months[1].need_by_hour[:] = 10.0
    months[1].need_by_hour[:24] = 20.0  # one peak day
    policy = PurchasePolicy(current_gpus=8, lead_time_weeks=4, batch_size=1, spot_share=0.5)
    plan = purchase_plan(months, policy, now=START - 10 * 168)
    assert [r["owned_gpus"] for r in plan["months"]] == [8, 10, 10]  # 20 * 0.5, kept after
    assert plan["months"][1]["spot_gpu_hours"] == pytest.approx(10 * 24)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("lead_time_weeks", 2, "4..12"), ("lead_time_weeks", 13, "4..12"),
     ("spot_share", 1.0, "spot_share"), ("batch_size", 0, "batch_size")],
)  # fmt: skip
def test_bad_policy_is_a_clear_error(field: str, value: float, match: str) -> None:
    policy = PurchasePolicy(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match=match):
        purchase_plan(_months([1]), policy, now=START)
