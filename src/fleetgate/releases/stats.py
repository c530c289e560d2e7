"""Statistics of eval runs: percentiles and the paired bootstrap of a score difference.

Example::

    delta, low, high = paired_bootstrap([1, 1, 0, 1], [1, 1, 1, 1], seed=7)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["paired_bootstrap", "percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100, nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def paired_bootstrap(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean of candidate - baseline, CI low, CI high): the items resampled with their pairs
    kept together, so what differs between items cancels out. Seeded: the same scores give
    the same interval."""
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError("paired scores need two equally long, non-empty lists")
    diffs = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = np.sort(diffs[picks].mean(axis=1))
    tail = (1 - confidence) / 2
    low = float(means[int(tail * (resamples - 1))])
    high = float(means[int(math.ceil((1 - tail) * (resamples - 1)))])
    return float(diffs.mean()), low, high
