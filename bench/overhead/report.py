"""Medians, ratios, the requirement checks, the printed table, and the docs section."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields
from pathlib import Path

from wrkrun import WrkResult

HEADING = "## Gateway overhead"
GATEWAY = "fleetgate"
BASELINE = "baseline"  # fleetgate from another source tree (--baseline-src), same run
# --baseline-twice: a second process of the baseline tree, measured like the others; its
# ratios to the first are what the same code scores against itself in this run (the noise)
AGAIN = "baseline-again"
# The targets for one gateway worker with every core feature on.
MIN_VS_LITELLM = 25.0
MIN_VS_BARE = 0.60
MAX_ADDED_P50_MS = 1.0
MAX_RSS_GROWTH = 0.10
MAX_P99_VS_BARE = 2.0  # the gateway's p99 at c=64 within 2x of the bare relay's
# "No worse than before in the same run", with room for run-to-run noise: throughput at c=64
# at least 95 % of the baseline's, p50 at c=1 at most 5 % above it.
MIN_VS_BASELINE = 0.95
MAX_P50_VS_BASELINE = 1.05

Cell = tuple[str, str, int]  # (target, mode, concurrency)


@dataclass(frozen=True)
class Check:
    """One requirement: what was measured against what was asked."""

    name: str
    value: float | None
    limit: float
    at_least: bool

    @property
    def passed(self) -> bool | None:
        """None when the check could not be measured in this run."""
        if self.value is None:
            return None
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    def render(self) -> str:
        """One line: value, bound and verdict."""
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[self.passed]
        bound = (">= " if self.at_least else "<= ") + f"{self.limit:g}"
        value = "-" if self.value is None else f"{self.value:.3g}"
        return f"{verdict:4}  {self.name}: {value} (target {bound})"


def medians(runs: dict[Cell, list[WrkResult]]) -> dict[Cell, dict[str, float]]:
    """The median of every metric over the repetitions of each cell."""
    out: dict[Cell, dict[str, float]] = {}
    for cell, results in runs.items():
        out[cell] = {
            f.name: float(statistics.median(getattr(r, f.name) for r in results))
            for f in fields(WrkResult)
        }
    return out


def _ratio(med: dict[Cell, dict[str, float]], a: Cell, b: Cell) -> float | None:
    if a not in med or b not in med or med[b]["request_throughput"] <= 0:
        return None
    return med[a]["request_throughput"] / med[b]["request_throughput"]


def _latency_ratio(
    med: dict[Cell, dict[str, float]], a: Cell, b: Cell, metric: str
) -> float | None:
    if a not in med or b not in med or med[b][metric] <= 0:
        return None
    return med[a][metric] / med[b][metric]


def ratios(med: dict[Cell, dict[str, float]], targets: list[str]) -> dict[str, float | None]:
    """Throughput ratios per mode and concurrency, p99 (and p50 against the baseline)
    ratios, and added p50 over direct at each cell."""
    out: dict[str, float | None] = {}
    cells = sorted({(mode, conc) for _, mode, conc in med})
    for mode, conc in cells:
        for peer in ("litellm", "bare", BASELINE):
            if GATEWAY in targets and peer in targets:
                key = f"{GATEWAY}/{peer} {mode} c={conc}"
                out[key] = _ratio(med, (GATEWAY, mode, conc), (peer, mode, conc))
        for peer in ("bare", BASELINE):
            if GATEWAY in targets and peer in targets:
                a, b = (GATEWAY, mode, conc), (peer, mode, conc)
                out[f"p99 {GATEWAY}/{peer} {mode} c={conc}"] = _latency_ratio(
                    med, a, b, "p99_e2el_ms"
                )
                if peer == BASELINE:
                    out[f"p50 {GATEWAY}/{peer} {mode} c={conc}"] = _latency_ratio(
                        med, a, b, "median_e2el_ms"
                    )
        if AGAIN in targets and BASELINE in targets:
            a, b = (AGAIN, mode, conc), (BASELINE, mode, conc)
            noise = f"{AGAIN}/{BASELINE} {mode} c={conc}"
            out[f"noise: {noise}"] = _ratio(med, a, b)
            out[f"noise: p99 {noise}"] = _latency_ratio(med, a, b, "p99_e2el_ms")
            out[f"noise: p50 {noise}"] = _latency_ratio(med, a, b, "median_e2el_ms")
        direct = med.get(("direct", mode, conc))
        for name in targets:
            cell = (name, mode, conc)
            if name != "direct" and direct is not None and cell in med:
                added = med[cell]["median_e2el_ms"] - direct["median_e2el_ms"]
                out[f"added p50 ms {name} {mode} c={conc}"] = added
    return out


def checks(
    ratio: dict[str, float | None],
    modes: list[str],
    rss_growth: float | None,
    rss_label: str,
    baseline: bool = False,
) -> list[Check]:
    """The issue's targets, evaluated on this run's medians; ``baseline``: also "no worse
    than the baseline tree" (throughput at c=64, p50 at c=1)."""
    out = []
    for mode in modes:
        out.append(
            Check(
                f"{GATEWAY}/litellm {mode} c=64",
                ratio.get(f"{GATEWAY}/litellm {mode} c=64"),
                MIN_VS_LITELLM,
                True,
            )
        )
        out.append(
            Check(
                f"{GATEWAY}/bare {mode} c=64",
                ratio.get(f"{GATEWAY}/bare {mode} c=64"),
                MIN_VS_BARE,
                True,
            )
        )
        out.append(
            Check(
                f"added p50 {mode} c=1 (ms)",
                ratio.get(f"added p50 ms {GATEWAY} {mode} c=1"),
                MAX_ADDED_P50_MS,
                False,
            )
        )
        name = f"p99 {GATEWAY}/bare {mode} c=64"
        out.append(Check(name, ratio.get(name), MAX_P99_VS_BARE, False))
        if baseline:
            name = f"{GATEWAY}/{BASELINE} {mode} c=64"
            out.append(Check(name, ratio.get(name), MIN_VS_BASELINE, True))
            name = f"p50 {GATEWAY}/{BASELINE} {mode} c=1"
            out.append(Check(name, ratio.get(name), MAX_P50_VS_BASELINE, False))
    out.append(Check(f"RSS growth {rss_label}", rss_growth, MAX_RSS_GROWTH, False))
    return out


def table(med: dict[Cell, dict[str, float]], targets: list[str]) -> list[str]:
    """Markdown table rows: one per (mode, concurrency, target), with ratios to direct."""
    rows = [
        "| mode | conc | target | req/s | vs direct | p50 ms | p99 ms | failed |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    cells = sorted({(mode, conc) for _, mode, conc in med})
    for mode, conc in cells:
        for name in targets:
            m = med.get((name, mode, conc))
            if m is None:
                continue
            vs = _ratio(med, (name, mode, conc), ("direct", mode, conc))
            rows.append(
                f"| {mode} | {conc} | {name} | {m['request_throughput']:,.0f} | "
                f"{'-' if vs is None else f'{vs:.2f}'} | {m['median_e2el_ms']:.2f} | "
                f"{m['p99_e2el_ms']:.2f} | {m['failed']:.0f} |"
            )
    return rows


def update_docs(path: Path, section: str) -> None:
    """Replace (or append) this benchmark's section of ``docs/results/benchmarks.md``."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == HEADING), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        tail = lines[end:]
        new = "\n".join(lines[:start] + section.rstrip("\n").splitlines())
        new += "\n\n" + "\n".join(tail) + "\n" if tail else "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
