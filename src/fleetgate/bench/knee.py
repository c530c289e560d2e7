"""Find the knee of a latency-against-load curve (Kneedle, for a convex increasing curve).

Both axes are scaled to 0..1; the knee is the point farthest below the straight line from the
first to the last point, i.e. where latency starts to climb faster than load. ``None`` with
fewer than three points, or when the run never saturated: latency at its highest is less than
``min_rise`` times its lowest (a flat curve's noise has a "farthest point" too, but no knee).

Example::

    knee_index([10, 20, 30, 40, 50], [100, 101, 103, 150, 400])   # 2
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SATURATED_RISE", "knee_index"]


SATURATED_RISE = 1.5  # latency grew by half: the load reached what the target can serve


def knee_index(
    load: Sequence[float], latency: Sequence[float], *, min_rise: float = SATURATED_RISE
) -> int | None:
    """Index (into the inputs) of the knee, or ``None``."""
    pairs = sorted(zip(load, latency, range(len(load)), strict=True))
    if len(pairs) < 3:
        return None
    x0, x1 = pairs[0][0], pairs[-1][0]
    ys = [p[1] for p in pairs]
    y0, y1 = min(ys), max(ys)
    if x1 <= x0 or y1 <= y0 or y1 < min_rise * y0:
        return None
    best, best_gap = None, 0.0
    for x, y, i in pairs[1:-1]:
        gap = (x - x0) / (x1 - x0) - (y - y0) / (y1 - y0)
        if gap > best_gap:
            best, best_gap = i, gap
    return best
