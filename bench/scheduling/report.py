"""The markdown of ``run.py``: medians over the runs (each with its FIFO baseline), the values
of every run in brackets, and where the fair mode's TTFT went (``breakdown.py``)."""

from __future__ import annotations

import statistics
from typing import Any

from load import MAX_TOKENS

from procs import Engine


def _get(run: dict[str, Any], path: str) -> Any:
    value: Any = run
    for part in path.split("."):
        value = value[part]
    return value


def _med(runs: list[dict[str, Any]], path: str) -> float:
    return round(statistics.median(float(_get(r, path)) for r in runs), 2)


def _each(runs: list[dict[str, Any]], path: str) -> str:
    return ", ".join(f"{float(_get(r, path)):g}" for r in runs)


def _share(runs: list[dict[str, Any]], key: str) -> tuple[float, str]:
    values = [r["fair"][key] / r["fifo"][key] for r in runs]
    return statistics.median(values), ", ".join(f"{v:.1%}" for v in values)


def _split(runs: list[dict[str, Any]], key: str, label: str) -> list[str]:
    parts = ("to_engine", "engine_wait", "engine_run", "back")
    rows = []
    for part in parts:
        cells = [f"{_med(runs, f'fair.{key}.{part}.{q}')}" for q in ("p50", "p95", "tail")]
        rows.append(f"| {label} | `{part}` | " + " | ".join(cells) + " |")
    full = _med(runs, f"fair.{key}.engine_full_at_arrival")
    rows.append(f"| {label} | engine batch full at arrival (share) | {full} | | |")
    return rows


def _generated(runs: list[dict[str, Any]], target: str) -> list[str]:
    """The row of tokens generated within the phase, when the runs measured it."""
    if not all("generated_tokens_per_s" in r["fair"] for r in runs):
        return []
    tput, tputs = _share(runs, "generated_tokens_per_s")
    return [
        f"| output tokens/s generated within the phase | "
        f"{_med(runs, 'fifo.generated_tokens_per_s')} | "
        f"{_med(runs, 'fair.generated_tokens_per_s')}: **{tput:.1%}** of fifo ({tputs}{target}) |"
    ]


def _flood(runs: list[dict[str, Any]]) -> list[str]:
    tput, tputs = _share(runs, "output_tokens_per_s")
    return [
        "| flood (A keeps 5x its share outstanding), median of runs | fifo | fair |",
        "| --- | --- | --- |",
        f"| B TTFT p95 alone (ms) | {_med(runs, 'fifo.b_alone.ttft_p95_ms')} | "
        f"{_med(runs, 'fair.b_alone.ttft_p95_ms')} |",
        f"| B TTFT p95 with the flood (ms) | {_med(runs, 'fifo.b_flood.ttft_p95_ms')} | "
        f"{_med(runs, 'fair.b_flood.ttft_p95_ms')} |",
        f"| B p95 ratio (target <= 1.5) | {_med(runs, 'fifo.b_p95_ratio')} | "
        f"**{_med(runs, 'fair.b_p95_ratio')}** ({_each(runs, 'fair.b_p95_ratio')}) |",
        f"| output tokens/s of the requests ended within the phase | "
        f"{_med(runs, 'fifo.output_tokens_per_s')} | "
        f"{_med(runs, 'fair.output_tokens_per_s')}: {tput:.1%} of fifo ({tputs}) |",
        *_generated(runs, "; target >= 95%"),
        f"| A refused (429/503) | {_med(runs, 'fifo.a_flood.refused')} | "
        f"{_med(runs, 'fair.a_flood.refused')} |",
        f"| A streams cut (preempted) | {_med(runs, 'fifo.a_flood.cut')} | "
        f"{_med(runs, 'fair.a_flood.cut')} |",
        "",
    ]


def _critical(runs: list[dict[str, Any]]) -> list[str]:
    tput, tputs = _share(runs, "output_tokens_per_s")
    return [
        "| critical under a batch flood, median of runs | fifo | fair |",
        "| --- | --- | --- |",
        f"| critical TTFT p95 solo (ms) | {_med(runs, 'fifo.critical_solo.ttft_p95_ms')} | "
        f"{_med(runs, 'fair.critical_solo.ttft_p95_ms')} |",
        f"| critical TTFT p95 with the flood (ms) | "
        f"{_med(runs, 'fifo.critical_flood.ttft_p95_ms')} | "
        f"{_med(runs, 'fair.critical_flood.ttft_p95_ms')} |",
        f"| ratio (target <= 1.2) | {_med(runs, 'fifo.critical_p95_ratio')} | "
        f"**{_med(runs, 'fair.critical_p95_ratio')}** "
        f"({_each(runs, 'fair.critical_p95_ratio')}) |",
        f"| output tokens/s of the requests ended within the phase | "
        f"{_med(runs, 'fifo.output_tokens_per_s')} | "
        f"{_med(runs, 'fair.output_tokens_per_s')} ({tput:.1%} of fifo; {tputs}) |",
        *_generated(runs, ""),
        f"| batch streams cut (preempted) | {_med(runs, 'fifo.batch_flood.cut')} | "
        f"{_med(runs, 'fair.batch_flood.cut')} |",
        "",
    ]


def _backlog(runs: list[dict[str, Any]]) -> list[str]:
    f, q = runs[0]["fifo"], runs[0]["fair"]
    return [
        "| two backlogged teams, A with 3x B's requests outstanding (first run) | fifo | fair |",
        "| --- | --- | --- |",
        f"| tokens served A / B | {f['served_tokens']['A']} / {f['served_tokens']['B']} | "
        f"{q['served_tokens']['A']} / {q['served_tokens']['B']} |",
        f"| largest gap in tokens served (bound {q['served_bound']}) | "
        f"{f['max_served_gap']} | {q['max_served_gap']} |",
        f"| largest gap of the scheduler's counters (bound {q['counter_bound']}, "
        f"{q['counter_points']} samples) | — | {q['max_counter_gap']} |",
        "",
    ]


def markdown(
    results: dict[str, list[dict[str, Any]]],
    e: Engine,
    duration: float,
    rate: float,
    guaranteed: int,
    reserve: float,
    pacing: float | None,
    extra: dict[str, Any] | None = None,
) -> str:
    runs = max((len(v) for v in results.values()), default=0)
    lines = [
        f"Engine: one `fleetgate sim`, max_num_seqs {e.max_num_seqs}, "
        + (
            "vLLM V0's priority policy (`--preempt-for-priority`: a full batch makes room for "
            "a more important request)"
            if e.preempt_for_priority
            else "vLLM v1's priority policy (a full batch is never preempted for a waiting request)"
        )
        + f", decode {e.decode_ms_per_step} ms/step "
        f"(+{e.decode_batch_factor} per running sequence), {MAX_TOKENS} output tokens per "
        f"request, {duration:g} s per phase, {runs} run(s) of each scenario (fifo and fair in "
        f"the same run). B and the critical team send {rate:g} req/s (Poisson) and have "
        f"`guaranteed: {guaranteed}` in `fair`; `fair` has `critical_reserve: {reserve:g}` "
        f"({int(e.max_num_seqs * reserve)} slots kept for the critical band and guarantees)"
        + (f" and `queue_pacing: {pacing:g}`" if pacing else ", no `queue_pacing`")
        + "".join(f", `{k}: {v}`" for k, v in (extra or {}).items())
        + ". "
        + "`fifo`: the gateway without the scheduler.",
        "",
    ]
    complete = {k: [r for r in v if "fifo" in r and "fair" in r] for k, v in results.items()}
    if complete.get("flood"):
        lines += _flood(complete["flood"])
    if complete.get("critical"):
        lines += _critical(complete["critical"])
    if complete.get("backlog"):
        lines += _backlog(complete["backlog"])
    split = []
    if complete.get("flood"):
        split += _split(complete["flood"], "b_alone_split", "B alone")
        split += _split(complete["flood"], "b_flood_split", "B with the flood")
    if complete.get("critical"):
        split += _split(complete["critical"], "critical_solo_split", "critical solo")
        split += _split(complete["critical"], "critical_flood_split", "critical, flood")
    if split:
        lines += [
            "Where `fair`'s TTFT went (ms; medians over the runs of each statistic; `tail`: "
            "the mean over the requests at or above the p95):",
            "",
            "| phase | part | p50 | p95 | tail |",
            "| --- | --- | --- | --- | --- |",
            *split,
            "",
        ]
    return "\n".join(lines)
