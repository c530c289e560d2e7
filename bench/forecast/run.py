"""Forecast backtest: six months of synthetic hourly history, trained on five, scored on the sixth.

The history (``fleetgate.plan.synthetic``) has an 8 %/month compounded trend, a weekly and daily
shape, Poisson and lognormal noise, and two three-day promotions (x2.5 in month 2, x2.2 in
month 6). Both promotions are marked as events without a multiplier, so the forecast of the
sixth month has to carry the first one's measured lift onto the second. Per run (a new seed
each), it prints the WAPE (``sum|f - a| / sum(a)``) of hourly requests and the MAPE of daily
requests for the forecast and for the seasonal-naive baseline (the last training week repeated),
measured on the same data, and their ratio; then the median over the runs. Target: forecast
error under 20 %.

Then the purchase plan: the same fit over all six months forecasts six more, sized through
``make_plan`` (4,000 tokens/s per GPU, redundancy 1.2, an 8-week lead time, batches of 8, 20 %
of peaks on spot), starting from the GPUs bought for the first two forecast months; it checks
that every order is placed at least the lead time before the month that needs it.

    PYTHONPATH=src python bench/forecast/run.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fleetgate.plan import PlanInputs
from fleetgate.plan.forecast import MONTH_H, fit_history, seasonal_naive, wape
from fleetgate.plan.history import format_hour, parse_hour
from fleetgate.plan.purchase import PurchasePolicy, monthly_gpus, purchase_plan
from fleetgate.plan.synthetic import synthetic_history

START = parse_hour("2026-01-05T00:00:00Z")
PROMOTIONS = [("spring-sale", 45, 3, 2.5), ("summer-sale", 163, 3, 2.2)]
LEAD_WEEKS = 8.0


def daily_mape(forecast: np.ndarray, actual: np.ndarray) -> float:
    f, a = forecast.reshape(-1, 24).sum(1), actual.reshape(-1, 24).sum(1)
    return float(np.mean(np.abs(f - a) / a))


def one_run(seed: int) -> dict[str, float]:
    history, events = synthetic_history(start=START, days=180, events=PROMOTIONS, seed=seed,
                                        requests_per_hour=800.0, growth_per_month=0.08)  # fmt: skip
    train = history.window(START, 5 * MONTH_H)
    test = history.window(START + 5 * MONTH_H, MONTH_H)
    t0 = time.perf_counter()
    fc = fit_history(train, events).forecast(test.start, MONTH_H).total("requests")
    fit_s = time.perf_counter() - t0
    naive = seasonal_naive(train.total("requests"), MONTH_H)
    actual = test.total("requests")
    return {
        "wape": wape(fc, actual), "wape_naive": wape(naive, actual),
        "mape_day": daily_mape(fc, actual), "mape_day_naive": daily_mape(naive, actual),
        "fit_s": fit_s,
    }  # fmt: skip


def purchase_check() -> bool:
    history, events = synthetic_history(start=START, days=180, events=PROMOTIONS, seed=99,
                                        requests_per_hour=150_000.0)  # fmt: skip
    fit = fit_history(history, events)
    end = START + history.hours
    fc = fit.forecast(end, 6 * MONTH_H)
    base = PlanInputs(dau=1, conversations_per_user=1, turns_per_conversation=1,
                      gpu_tokens_per_s=4000.0, redundancy=1.2)  # fmt: skip
    months = monthly_gpus(fc, base)
    policy = PurchasePolicy(lead_time_weeks=LEAD_WEEKS, batch_size=8, spot_share=0.2,
                            current_gpus=int(np.ceil(months[1].gpus_peak * 0.8)))  # fmt: skip
    plan = purchase_plan(months, policy, now=end)
    print(f"\npurchase plan made {format_hour(end)}, lead time {LEAD_WEEKS:g} weeks, "
          f"owned at start {policy.current_gpus}")  # fmt: skip
    for r in plan["months"]:
        print(f"  {r['month']}  peak GPUs {r['gpus_peak']:>4}  owned {r['owned_gpus']:>4}  "
              f"spot GPU-h {r['spot_gpu_hours']:>7,.0f}")  # fmt: skip
    ok = True
    lead_h = LEAD_WEEKS * 168
    for o in plan["orders"]:
        margin_h = parse_hour(o["for_month"]) - parse_hour(o["order_by"])
        good = not o["late"] and margin_h >= lead_h
        ok &= good
        print(f"  order {o['gpus']:>3} GPUs by {o['order_by']} for {o['for_month']}: "
              f"{margin_h / 168:.1f} weeks ahead {'ok' if good else 'TOO LATE'}")  # fmt: skip
    ok &= bool(plan["orders"])
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    head = ("seed", "WAPE h", "naive", "ratio", "MAPE d", "naive", "fit s")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (4, 8, 8, 6, 8, 8, 6), strict=True)))
    for seed in range(1, args.runs + 1):
        r = one_run(seed)
        rows.append(r)
        print(f"{seed:>4} {r['wape']:>8.1%} {r['wape_naive']:>8.1%} "
              f"{r['wape'] / r['wape_naive']:>6.2f} {r['mape_day']:>8.1%} "
              f"{r['mape_day_naive']:>8.1%} {r['fit_s']:>6.2f}")  # fmt: skip
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f" med {med['wape']:>8.1%} {med['wape_naive']:>8.1%} "
          f"{med['wape'] / med['wape_naive']:>6.2f} {med['mape_day']:>8.1%} "
          f"{med['mape_day_naive']:>8.1%} {med['fit_s']:>6.2f}")  # fmt: skip
    target = max(med["wape"], med["mape_day"]) < 0.20
    print(f"forecast error under 20 %: {'yes' if target else 'NO'}")
    ordered = purchase_check()
    print(f"every order placed at least the lead time ahead: {'yes' if ordered else 'NO'}")


if __name__ == "__main__":
    main()
