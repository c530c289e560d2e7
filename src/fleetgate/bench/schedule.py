"""Arrival schedules, computed up front as absolute offsets from the run's start.

The runner sends request ``i`` at ``start + offsets[i]``; offsets never depend on how late
earlier sends were, so a slow client shows up as schedule lag instead of silently lowering the
rate (the coordinated-omission trap).

Example::

    arrival_offsets(5, rate=10.0, kind="constant")   # [0.0, 0.1, 0.2, 0.3, 0.4]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from fleetgate.errors import InvalidRequest

__all__ = ["ArrivalKind", "arrival_offsets", "offsets_for_duration", "trace_offsets"]

ArrivalKind = Literal["constant", "poisson", "gamma"]


def arrival_offsets(
    n: int, *, rate: float, kind: ArrivalKind = "constant", burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Send times (seconds) of ``n`` requests at ``rate`` per second.

    ``constant``: evenly spaced. ``poisson``: exponential gaps. ``gamma``: gaps drawn from
    Gamma(shape=burstiness, scale=1/(rate*burstiness)) as in ``vllm bench serve`` (burstiness < 1
    is burstier, > 1 smoother; 1 is Poisson). The first request goes at 0. A rate of ``inf``
    sends everything at once.
    """
    if n <= 0:
        return []
    if rate <= 0:
        raise InvalidRequest("rate must be > 0", param="rate")
    if rate == float("inf"):
        return [0.0] * n
    if kind == "constant":
        return [i / rate for i in range(n)]
    if kind not in ("poisson", "gamma"):
        raise InvalidRequest(f"unknown arrival kind {kind!r}", param="arrival")
    shape = 1.0 if kind == "poisson" else burstiness
    if shape <= 0:
        raise InvalidRequest("burstiness must be > 0", param="burstiness")
    gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (rate * shape), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def offsets_for_duration(
    duration: float,
    *,
    rate: float,
    kind: ArrivalKind = "constant",
    burstiness: float = 1.0,
    seed: int = 0,
    max_count: int | None = None,
) -> list[float]:
    """Offsets of every request due within ``duration`` seconds (at most ``max_count``)."""
    expected = int(rate * duration * 1.2) + 16
    n = expected if max_count is None else min(expected, max_count)
    return [
        t
        for t in arrival_offsets(n, rate=rate, kind=kind, burstiness=burstiness, seed=seed)
        if t < duration
    ]


def trace_offsets(ats: Sequence[float | None]) -> list[float]:
    """Offsets of a replayed trace; every request must carry ``at``."""
    out: list[float] = []
    for i, at in enumerate(ats):
        if at is None:
            raise InvalidRequest(f"request {i} has no timestamp: not a trace", param="dataset")
        out.append(at)
    return out
