"""Compute a capacity plan from ``PlanInputs`` (formulas in ``model``).

Example (the 1M-DAU worked example)::

    plan = make_plan(PlanInputs(dau=1_000_000, conversations_per_user=3,
                                turns_per_conversation=5, round_gpus_to=100))
    plan["qps_avg"]            # 520.83
    plan["gpus_peak"]          # 1000 (976.56 rounded up to a multiple of 100)
    plan["cost_month_always_on_usd"]   # 2160000.0
"""

from __future__ import annotations

import math
from typing import Any

from fleetgate.plan.des import ttft_quantile_des
from fleetgate.plan.model import PlanInputs, round_up
from fleetgate.plan.queueing import min_servers_for_wait, wait_quantile_s

__all__ = [
    "hourly_gpus",
    "make_plan",
    "predict_ttft_p95_ms",
    "predict_ttft_p95_ms_des",
    "queueing_sizing",
]


def hourly_gpus(inp: PlanInputs) -> list[int]:
    """GPUs an autoscaler runs in each of the 24 hours: each hour's need with headroom (never
    past the peak fleet), the busiest hour at least the peak fleet (``model``'s formulas)."""
    weights = inp.weights()
    total = sum(weights)
    per_day = inp.dau * inp.conversations_per_user * inp.turns_per_conversation
    peak = _gpus_avg_exact(inp) * inp.peak_factor
    busiest = max(range(24), key=lambda h: weights[h])
    out = []
    for h, w in enumerate(weights):
        qps = per_day * w / total / 3600.0
        need = qps * inp.tokens_per_request / inp.gpu_tokens_per_s * inp.redundancy
        if h == busiest:
            need = max(need, peak)
        gpus = max(float(inp.min_gpus), need, min(need * inp.autoscale_headroom, peak))
        out.append(round_up(gpus, inp.round_gpus_to))
    return out


def _gpus_avg_exact(inp: PlanInputs) -> float:
    """GPUs for the mean load of the active hours (``qps_avg``)."""
    per_day = inp.dau * inp.conversations_per_user * inp.turns_per_conversation
    qps_avg = per_day / (inp.active_hours * 3600.0)
    return qps_avg * inp.tokens_per_request / inp.gpu_tokens_per_s * inp.redundancy


def _service_s(inp: PlanInputs) -> float:
    # A slot runs at gpu_tokens_per_s / slots_per_gpu, unless bench measured the holding time.
    if inp.service_time_s is not None:
        return inp.service_time_s
    return inp.slots_per_gpu * inp.tokens_per_request / inp.gpu_tokens_per_s


def queueing_sizing(inp: PlanInputs, qps: float) -> dict[str, Any]:
    """GPUs for the TTFT P95 target at ``qps`` by Erlang-C (see ``queueing``)."""
    service_s = _service_s(inp)
    out: dict[str, Any] = {"service_time_s": service_s, "slots_per_gpu": inp.slots_per_gpu}
    if inp.ttft_p95_target_ms is None:
        return out
    budget_s = (inp.ttft_p95_target_ms - inp.base_ttft_p95_ms) / 1000.0
    out["ttft_p95_target_ms"] = inp.ttft_p95_target_ms
    if budget_s < 0:
        out["gpus_for_ttft_p95"] = None
        out["note"] = "target is below the unloaded TTFT P95: no fleet size meets it"
        return out
    servers = min_servers_for_wait(qps, service_s, 0.95, budget_s)
    # never fewer than the token throughput needs at this rate
    floor_gpus = qps * inp.tokens_per_request / inp.gpu_tokens_per_s
    gpus = round_up(
        max(math.ceil(servers / inp.slots_per_gpu), floor_gpus) * inp.redundancy,
        inp.round_gpus_to,
    )
    wait = wait_quantile_s(gpus * inp.slots_per_gpu, qps, service_s, 0.95)
    out["gpus_for_ttft_p95"] = gpus
    out["predicted_ttft_p95_ms"] = inp.base_ttft_p95_ms + wait * 1000.0
    if inp.service_cv is not None:
        des_gpus = _des_gpus(inp, qps, service_s, gpus)
        out["gpus_for_ttft_p95_des"] = des_gpus
        out["predicted_ttft_p95_ms_des"] = predict_ttft_p95_ms_des(inp, des_gpus, qps)
    return out


def predict_ttft_p95_ms_des(inp: PlanInputs, gpus: int, qps: float) -> float:
    """TTFT P95 of ``gpus`` GPUs at ``qps`` by the discrete-event simulation (``des``).

    The unloaded TTFT is taken as normal with mean ``base_ttft_p95_ms - 1.645 * std`` so that
    its own P95 is ``base_ttft_p95_ms``."""
    std_s = inp.base_ttft_std_ms / 1000.0
    return 1000.0 * ttft_quantile_des(
        rate=qps,
        servers=gpus * inp.slots_per_gpu,
        service_mean_s=_service_s(inp),
        service_cv=inp.service_cv or 0.0,
        base_ttft_mean_s=max(0.0, inp.base_ttft_p95_ms / 1000.0 - 1.645 * std_s),
        base_ttft_std_s=std_s,
        service_full_s=inp.service_time_full_s,
    )


def _des_gpus(inp: PlanInputs, qps: float, service_s: float, upper: int) -> int:
    assert inp.ttft_p95_target_ms is not None
    # overloaded at or below lo; and never fewer than the token throughput needs
    lo = max(1, math.floor(qps * service_s / inp.slots_per_gpu))
    lo = max(lo, math.ceil(qps * inp.tokens_per_request / inp.gpu_tokens_per_s) - 1)
    hi = max(upper, lo + 1)
    while predict_ttft_p95_ms_des(inp, hi, qps) > inp.ttft_p95_target_ms:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if predict_ttft_p95_ms_des(inp, mid, qps) <= inp.ttft_p95_target_ms:
            hi = mid
        else:
            lo = mid
    return round_up(hi * inp.redundancy, inp.round_gpus_to)


def predict_ttft_p95_ms(inp: PlanInputs, gpus: int, qps: float) -> float:
    """Predicted TTFT P95 of ``gpus`` GPUs at ``qps`` (``inf`` when overloaded)."""
    service_s = _service_s(inp)
    wait = wait_quantile_s(gpus * inp.slots_per_gpu, qps, service_s, 0.95)
    return inp.base_ttft_p95_ms + wait * 1000.0


def _disagg(inp: PlanInputs, qps_peak: float) -> dict[str, Any] | None:
    if not inp.prefill_tokens_per_s_per_gpu or not inp.decode_tokens_per_s_per_gpu:
        return None
    pre = qps_peak * inp.input_tokens / inp.prefill_tokens_per_s_per_gpu * inp.redundancy
    dec = qps_peak * inp.output_tokens / inp.decode_tokens_per_s_per_gpu * inp.redundancy
    p, d = round_up(pre, inp.round_gpus_to), round_up(dec, inp.round_gpus_to)
    return {
        "prefill_gpus_exact": pre,
        "decode_gpus_exact": dec,
        "prefill_gpus": p,
        "decode_gpus": d,
        "total_gpus": p + d,
        "cost_month_usd": (p + d) * inp.gpu_price_per_hour * inp.hours_per_month,
    }


def make_plan(inp: PlanInputs) -> dict[str, Any]:
    """The plan as a flat JSON-ready dict (``qps_avg``, ``gpus_peak``, costs, ...)."""
    inp.validate()
    per_day = inp.dau * inp.conversations_per_user * inp.turns_per_conversation
    qps_avg = per_day / (inp.active_hours * 3600.0)
    qps_peak = qps_avg * inp.peak_factor
    tps_avg = qps_avg * inp.tokens_per_request
    gpus_avg_exact = tps_avg / inp.gpu_tokens_per_s * inp.redundancy
    gpus_peak_exact = gpus_avg_exact * inp.peak_factor
    gpus_peak = round_up(gpus_peak_exact, inp.round_gpus_to)
    hourly = hourly_gpus(inp)
    day_hours = inp.hours_per_month / 24.0
    return {
        "requests_per_day": per_day,
        "qps_avg": qps_avg,
        "qps_peak": qps_peak,
        "tokens_per_request": inp.tokens_per_request,
        "tokens_per_s_avg": tps_avg,
        "tokens_per_s_peak": tps_avg * inp.peak_factor,
        "gpu_tokens_per_s": inp.gpu_tokens_per_s,
        "gpus_avg_exact": gpus_avg_exact,
        "gpus_peak_exact": gpus_peak_exact,
        "round_gpus_to": inp.round_gpus_to,
        "gpus_avg": round_up(gpus_avg_exact, inp.round_gpus_to),
        "gpus_day_avg_exact": gpus_avg_exact * inp.active_hours / 24.0,
        "gpus_autoscaled_avg": sum(hourly) / 24.0,
        "gpus_peak": gpus_peak,
        "gpu_price_per_hour": inp.gpu_price_per_hour,
        "hours_per_month": inp.hours_per_month,
        "cost_month_always_on_usd": gpus_peak * inp.gpu_price_per_hour * inp.hours_per_month,
        "cost_month_autoscaled_usd": sum(hourly) * inp.gpu_price_per_hour * day_hours,
        "gpus_by_hour": hourly,
        "diurnal_weights": list(inp.weights()),
        "queueing": queueing_sizing(inp, qps_peak),
        "disaggregated": _disagg(inp, qps_peak),
    }
