"""Multi-point load profiles: stepped rates, sweep, and the goodput search.

- ``stepped``: the given rates one after another, each for ``step_duration`` seconds.
- ``sweep``: synchronous (one user) to find the unloaded rate, then saturation (many users) to
  find the ceiling, then ``n - 2`` open-loop rates evenly between them (GuideLLM's sweep).
- ``search``: the highest rate (or concurrency) whose point meets the SLO: double from
  ``start`` until a point misses, then bisect between the last pass and the first miss,
  ``iterations`` times at most. Every probe is one bounded point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fleetgate.bench.point import LoadPoint, PointOptions, PointResult, run_point
from fleetgate.bench.slo import Slo

__all__ = ["ProfileResult", "search", "stepped", "sweep"]

PointRunner = Callable[[PointOptions, LoadPoint], PointResult]


@dataclass
class ProfileResult:
    """The points of a multi-point run, in the order they ran, and the search's answer."""

    profile: str
    points: list[PointResult] = field(default_factory=list)
    best: dict[str, Any] | None = None


def _count(rate: float, duration: float, cap: int) -> int:
    return max(1, min(cap, int(rate * duration) + 1))


def _at_rate(base: LoadPoint, rate: float, duration: float) -> LoadPoint:
    """``base`` sent at ``rate`` requests a second for ``duration`` seconds."""
    return replace(
        base,
        kind="rate",
        value=rate,
        duration=duration,
        max_requests=_count(rate, duration, base.max_requests),
    )


def stepped(
    opts: PointOptions,
    rates: Sequence[float],
    step_duration: float,
    base: LoadPoint,
    runner: PointRunner = run_point,
) -> ProfileResult:
    """Each rate for ``step_duration`` seconds (at most ``base.max_requests`` requests each)."""
    out = ProfileResult("stepped")
    for rate in rates:
        out.points.append(runner(opts, _at_rate(base, rate, step_duration)))
    return out


def sweep(
    opts: PointOptions,
    n: int,
    step_duration: float,
    base: LoadPoint,
    saturation_concurrency: int = 256,
    runner: PointRunner = run_point,
) -> ProfileResult:
    """Synchronous, saturation, then ``n - 2`` rates in between (``n >= 2``)."""
    out = ProfileResult("sweep")
    sync = runner(opts, replace(base, kind="concurrency", value=1, duration=step_duration))
    sat = runner(
        opts,
        replace(base, kind="concurrency", value=saturation_concurrency, duration=step_duration),
    )
    lo = float(sync.summary["request_throughput"])
    hi = float(sat.summary["request_throughput"])
    out.points.append(sync)
    middle = max(0, n - 2)
    for i in range(1, middle + 1):
        rate = lo + (hi - lo) * i / (middle + 1)
        if rate <= 0:
            continue
        out.points.append(runner(opts, _at_rate(base, rate, step_duration)))
    out.points.append(sat)
    return out


def search(
    opts: PointOptions,
    slo: Slo,
    step_duration: float,
    base: LoadPoint,
    *,
    dimension: Literal["rate", "concurrency"] = "rate",
    start: float = 1.0,
    limit: float = 100_000.0,
    iterations: int = 6,
    runner: PointRunner = run_point,
) -> ProfileResult:
    """The highest load meeting ``slo``; ``best`` is that point's summary (``None`` if even
    ``start`` misses)."""
    out = ProfileResult(f"search-{dimension}")

    def probe(value: float) -> bool:
        count = (
            _count(value, step_duration, base.max_requests)
            if dimension == "rate"
            else base.max_requests
        )
        if dimension == "concurrency":
            value = float(max(1, round(value)))
        res = runner(
            opts,
            replace(base, kind=dimension, value=value, duration=step_duration, max_requests=count),
        )
        res.summary["slo_met"] = slo.met(res.summary)
        res.summary["slo_violations"] = slo.violations(res.summary)
        out.points.append(res)
        if res.summary["slo_met"] and (out.best is None or value > out.best["offered_load"]):
            out.best = res.summary
        return bool(res.summary["slo_met"])

    good, bad = 0.0, None
    value = start
    for _ in range(iterations + 20):  # doubling phase, bounded by `limit`
        if value > limit or not probe(value):
            bad = min(value, limit)
            break
        good, value = value, value * 2
    if bad is None:
        return out
    for _ in range(iterations):
        mid = (good + bad) / 2 if good else bad / 2
        if dimension == "concurrency" and round(mid) in (round(good), round(bad)):
            break
        if probe(mid):
            good = mid
        else:
            bad = mid
        if good and bad / good < 1.05:
            break
    return out
