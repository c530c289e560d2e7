"""A forecast -> GPUs per month (through ``make_plan``) -> a purchase plan with a lead time.

Per 30-day month of the forecast, the month's traffic becomes `PlanInputs` (its requests per
day, tokens per request, 24-hour shape and ``peak_factor = peak hour / mean hour``), and
``make_plan`` sizes it: ``gpus_peak``, or the prefill+decode split when per-phase throughput is
given, or the TTFT-target sizing when larger. The hourly need is
``tokens_per_s_h / gpu_tokens_per_s * redundancy``.

Purchases: owned GPUs cover ``(1 - spot_share)`` of each month's peak (never fewer than an
earlier month's: bought GPUs stay); each month's increase is rounded up to ``batch_size`` and
ordered ``lead_time_weeks`` before the month starts. An order whose date has passed is *late*:
ordered now, it arrives after the lead time, and spot covers the gap. Spot covers every hour
whose need is above the owned GPUs that have arrived.

Example::

    months = monthly_gpus(forecast, base_inputs)
    plan = purchase_plan(months, PurchasePolicy(current_gpus=8, lead_time_weeks=8), now=now)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from fleetgate.errors import InvalidRequest
from fleetgate.plan.forecast import MONTH_H, WEEK_H, Forecast
from fleetgate.plan.history import format_hour
from fleetgate.plan.model import PlanInputs, round_up
from fleetgate.plan.planner import make_plan

__all__ = ["MonthNeed", "PurchasePolicy", "monthly_gpus", "purchase_plan"]


@dataclass(frozen=True)
class MonthNeed:
    """One planning month: its first hour, GPUs at its peak and the GPUs needed per hour."""

    start: int
    requests: float
    tokens: float
    peak_tokens_per_s: float
    gpus_peak: int
    need_by_hour: np.ndarray
    prefill_gpus: int | None = None
    decode_gpus: int | None = None


def monthly_gpus(forecast: Forecast, base: PlanInputs) -> list[MonthNeed]:
    """GPUs per 30-day month of ``forecast`` (whole months only), sized by ``make_plan`` with
    ``base``'s per-GPU throughput, redundancy, rounding, price and PD split."""
    req_all, tin_all, tout_all = (forecast.total(f) for f in ("requests", "input_tokens",
                                                               "output_tokens"))  # fmt: skip
    out = []
    for m in range(forecast.hours // MONTH_H):
        sl = slice(m * MONTH_H, (m + 1) * MONTH_H)
        req, tin, tout = req_all[sl], tin_all[sl], tout_all[sl]
        total = float(req.sum())
        if total <= 0:
            raise InvalidRequest("a forecast month has no requests", param="history")
        hours = np.arange(forecast.start + m * MONTH_H, forecast.start + (m + 1) * MONTH_H)
        diurnal = [float(req[hours % 24 == k].mean()) for k in range(24)]
        inputs = replace(
            base,
            dau=total / (MONTH_H / 24),
            conversations_per_user=1.0,
            turns_per_conversation=1.0,
            active_hours=24.0,
            peak_factor=max(1.0, float(req.max() / req.mean())),
            input_tokens=float(tin.sum()) / total,
            output_tokens=float(tout.sum()) / total,
            diurnal=diurnal if sum(diurnal) > 0 else None,
            hours_per_month=float(MONTH_H),
        )
        plan = make_plan(inputs)
        gpus = int(plan["gpus_peak"])
        split = plan["disaggregated"]
        if split is not None:
            gpus = int(split["total_gpus"])
        ttft = plan["queueing"].get("gpus_for_ttft_p95")
        if isinstance(ttft, int):
            gpus = max(gpus, ttft)
        tps = (tin + tout) / 3600.0
        need = np.ceil(tps / base.gpu_tokens_per_s * base.redundancy - 1e-9)
        out.append(
            MonthNeed(
                start=int(hours[0]),
                requests=total,
                tokens=float((tin + tout).sum()),
                peak_tokens_per_s=float(tps.max()),
                gpus_peak=gpus,
                need_by_hour=need,
                prefill_gpus=None if split is None else int(split["prefill_gpus"]),
                decode_gpus=None if split is None else int(split["decode_gpus"]),
            )
        )
    if not out:
        raise InvalidRequest("the forecast is shorter than one month", param="months")
    return out


@dataclass(frozen=True)
class PurchasePolicy:
    """How GPUs are bought: lead time, batch, the share of peaks left to spot, prices."""

    current_gpus: int = 0
    lead_time_weeks: float = 8.0
    batch_size: int = 8
    spot_share: float = 0.2
    gpu_price_per_hour: float = 3.0  # an owned GPU, amortised
    spot_price_per_hour: float = 6.0

    def validate(self) -> None:
        if not 4 <= self.lead_time_weeks <= 12:
            raise InvalidRequest("lead_time_weeks must be within 4..12", param="lead_time_weeks")
        if self.batch_size < 1 or self.current_gpus < 0:
            raise InvalidRequest("batch_size must be >= 1 and current_gpus >= 0")
        if not 0 <= self.spot_share < 1:
            raise InvalidRequest("spot_share must be within [0, 1)", param="spot_share")
        if self.gpu_price_per_hour < 0 or self.spot_price_per_hour < 0:
            raise InvalidRequest("prices must be >= 0", param="gpu_price")


def purchase_plan(months: list[MonthNeed], policy: PurchasePolicy, *, now: int) -> dict[str, Any]:
    """Orders (order-by date, arrival, GPUs, late or not) and a per-month table of owned GPUs,
    spot GPU-hours and cost. ``now``: the epoch hour the plan is made."""
    policy.validate()
    lead_h = int(round(policy.lead_time_weeks * WEEK_H))
    owned_target = policy.current_gpus
    planned = policy.current_gpus
    orders: list[dict[str, Any]] = []
    arrivals: list[tuple[int, int]] = []  # (epoch hour, gpus)
    rows = []
    for m in months:
        owned_target = max(owned_target, math.ceil(m.gpus_peak * (1 - policy.spot_share) - 1e-9))
        if owned_target > planned:
            buy = round_up(owned_target - planned, policy.batch_size)
            order_by = m.start - lead_h
            late = order_by < now
            arrives = now + lead_h if late else m.start
            orders.append({
                "for_month": format_hour(m.start), "order_by": format_hour(max(order_by, now)),
                "latest_order_by": format_hour(order_by), "arrives": format_hour(arrives),
                "gpus": buy, "late": late,
            })  # fmt: skip
            arrivals.append((arrives, buy))
            planned += buy
        hours = np.arange(m.start, m.start + MONTH_H)
        owned_h = np.full(MONTH_H, float(policy.current_gpus))
        for at, n in arrivals:
            owned_h[hours >= at] += n
        spot_h = np.maximum(0.0, m.need_by_hour - owned_h)
        rows.append({
            "month": format_hour(m.start), "requests": m.requests, "tokens": m.tokens,
            "peak_tokens_per_s": m.peak_tokens_per_s, "gpus_peak": m.gpus_peak,
            "prefill_gpus": m.prefill_gpus, "decode_gpus": m.decode_gpus,
            "owned_gpus": int(owned_h[-1]), "spot_gpu_hours": float(spot_h.sum()),
            "spot_peak_gpus": int(spot_h.max()),
            "cost_usd": float(owned_h.sum() * policy.gpu_price_per_hour
                              + spot_h.sum() * policy.spot_price_per_hour),
        })  # fmt: skip
    return {"policy": asdict(policy), "orders": orders, "months": rows}
