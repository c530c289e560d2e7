"""A synthetic hourly history with a known trend, week shape and events (benchmarks, tests, demos).

Example::

    history, events = synthetic_history(start=parse_hour("2026-01-05"), days=182, seed=1)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fleetgate.plan.events import Event
from fleetgate.plan.forecast import MONTH_H, hour_of_week
from fleetgate.plan.history import HourlyHistory

__all__ = ["default_week_shape", "synthetic_history"]


def default_week_shape(
    weekend: float = 0.6, night: float = 0.15, evening_peak: int = 20
) -> np.ndarray:
    """168 hour-of-week weights (Monday 00:00 first): a day shape that is low at night and
    peaks at ``evening_peak`` o'clock, weekends at ``weekend`` of weekdays."""
    hours = np.arange(24)
    day = night + (1 - night) * np.exp(-(((hours - evening_peak + 6) % 24 - 6) ** 2) / 18.0)
    day += 0.5 * (1 - night) * np.exp(-((hours - 11) ** 2) / 8.0)
    week = np.concatenate([day * (weekend if d >= 5 else 1.0) for d in range(7)])
    out: np.ndarray = week / week.mean()
    return out


def synthetic_history(
    *,
    start: int,
    days: int,
    requests_per_hour: float = 1000.0,
    growth_per_month: float = 0.08,
    week_shape: np.ndarray | None = None,
    events: Sequence[tuple[str, int, int, float]] = (),
    input_tokens: float = 1200.0,
    output_tokens: float = 300.0,
    noise: float = 0.05,
    seed: int = 0,
    alias: str = "chat",
    linear: bool = False,
) -> tuple[HourlyHistory, list[Event]]:
    """``days`` of hourly traffic from epoch hour ``start``: ``requests_per_hour`` on average at
    the start, growing ``growth_per_month`` (compounded; ``linear``: the same amount each
    month), shaped by ``week_shape``, with Poisson counts times lognormal noise (``noise``).
    ``events``: ``(name, first_day, days_long, multiplier)``; returned as marked `Event`s
    without their multiplier (the forecast has to measure it)."""
    rng = np.random.default_rng(seed)
    shape = default_week_shape() if week_shape is None else np.asarray(week_shape, dtype=float)
    n = days * 24
    h = np.arange(start, start + n)
    months = (h - start) / MONTH_H
    trend = (1 + growth_per_month * months) if linear else (1 + growth_per_month) ** months
    mean = requests_per_hour * trend * shape[hour_of_week(h)]
    marked = []
    for name, first_day, length, mult in events:
        lo, hi = first_day * 24, (first_day + length) * 24
        mean[lo:hi] *= mult
        marked.append(Event(name=name, start=start + lo, end=start + hi, kind="promotion"))
    mean = mean * np.exp(rng.normal(0.0, noise, n) - noise**2 / 2)
    req = rng.poisson(mean).astype(float)
    tok_in = req * input_tokens * np.exp(rng.normal(0.0, noise / 2, n))
    tok_out = req * output_tokens * np.exp(rng.normal(0.0, noise / 2, n))
    series = {alias: {"requests": req, "input_tokens": tok_in, "output_tokens": tok_out}}
    return HourlyHistory(start, n, series), marked
