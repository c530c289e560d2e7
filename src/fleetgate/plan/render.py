"""Show a plan: a fixed-width table and a PNG plot (GPUs by hour, always-on against
autoscaled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.extras import pyplot

__all__ = ["plan_table", "plot_plan"]

_ROWS = (
    ("requests_per_day", "requests per day", "{:,.0f}"),
    ("qps_avg", "QPS average (active hours)", "{:,.2f}"),
    ("qps_peak", "QPS peak", "{:,.2f}"),
    ("tokens_per_s_avg", "tokens/s avg (active hours)", "{:,.0f}"),
    ("tokens_per_s_peak", "tokens/s peak", "{:,.0f}"),
    ("gpus_avg_exact", "GPUs active-hours load (exact)", "{:,.2f}"),
    ("gpus_day_avg_exact", "GPUs average over the day", "{:,.2f}"),
    ("gpus_peak_exact", "GPUs peak (exact)", "{:,.2f}"),
    ("gpus_peak", "GPUs peak (rounded up)", "{:,}"),
    ("gpus_autoscaled_avg", "GPUs autoscaled, day average", "{:,.2f}"),
    ("cost_month_always_on_usd", "cost/month always-on $", "{:,.0f}"),
    ("cost_month_autoscaled_usd", "cost/month autoscaled $", "{:,.0f}"),
)


def plan_table(plan: dict[str, Any]) -> str:
    """The plan as aligned ``label  value`` lines."""
    lines = [f"{label:<30} {fmt.format(plan[key])}" for key, label, fmt in _ROWS]
    hourly = plan["gpus_by_hour"]
    busiest = max(range(len(hourly)), key=lambda h: hourly[h])
    lines.insert(
        len(_ROWS) - 2,
        f"{'GPUs autoscaled, busiest hour':<30} {hourly[busiest]:,} ({busiest:02d}:00)",
    )
    lines.append(f"{'GPU rounding':<30} up to a multiple of {plan['round_gpus_to']}")
    q = plan["queueing"]
    if q.get("gpus_for_ttft_p95") is not None:
        lines.append(
            f"{'GPUs for TTFT P95 target':<30} {q['gpus_for_ttft_p95']:,} "
            f"(predicted {q['predicted_ttft_p95_ms']:.0f} ms "
            f"<= {q['ttft_p95_target_ms']:.0f} ms, Erlang-C)"
        )
        if q.get("gpus_for_ttft_p95_des") is not None:
            lines.append(
                f"{'GPUs for TTFT P95 (simulated)':<30} {q['gpus_for_ttft_p95_des']:,} "
                f"(predicted {q['predicted_ttft_p95_ms_des']:.0f} ms, discrete-event)"
            )
    elif "note" in q:
        lines.append(f"{'GPUs for TTFT P95 target':<30} {q['note']}")
    d = plan["disaggregated"]
    if d:
        lines.append(
            f"{'disaggregated prefill/decode':<30} {d['prefill_gpus']:,} + "
            f"{d['decode_gpus']:,} = {d['total_gpus']:,} GPUs"
        )
    return "\n".join(lines)


def plot_plan(plan: dict[str, Any], path: Path) -> None:
    """Write a PNG: autoscaled GPUs per hour against the always-on peak fleet."""
    plt = pyplot("plotting the plan")

    hours = list(range(24))
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.step(hours, plan["gpus_by_hour"], where="post", label="autoscaled GPUs")
    ax.axhline(plan["gpus_peak"], color="red", linestyle="--", label="always-on (peak) GPUs")
    ax.axhline(
        plan["gpus_autoscaled_avg"], color="gray", linestyle=":",
        label="autoscaled GPUs, average over the day",
    )  # fmt: skip
    ax.set(xlabel="hour of day", ylabel="GPUs", title="fleetgate plan: GPUs by hour")
    ax.legend()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
