"""``fleetgate bench compare A.json B.json``: B against A, field by field, as ratios.

Works on any two ``vllm bench serve``-shaped results (ours or vLLM's). A multi-point result is
compared point by point (by position).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetgate.bench.metrics import RATE_FIELDS

__all__ = ["COMPARE_FIELDS", "compare", "format_comparison"]

COMPARE_FIELDS = (
    *RATE_FIELDS,
    "mean_ttft_ms",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "p99_e2el_ms",
    "p99_schedule_lag_ms",
    "completed",
    "failed",
)


def _points(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    points = data.get("points")
    return list(points) if isinstance(points, list) else [data]


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{point, field, a, b, ratio}``; ratio is b/a (``None`` when a is 0 or missing)."""
    rows = []
    for n, (pa, pb) in enumerate(zip(_points(a), _points(b), strict=False)):
        for f in COMPARE_FIELDS:
            va, vb = pa.get(f), pb.get(f)
            if not isinstance(va, int | float) or not isinstance(vb, int | float):
                continue
            ratio = (vb / va) if va else None
            rows.append({"point": n, "field": f, "a": va, "b": vb, "ratio": ratio})
    return rows


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table: field, A, B, B/A."""
    lines = [f"{'point':>5} {'field':<24} {'A':>12} {'B':>12} {'B/A':>8}"]
    for r in rows:
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(f"{r['point']:>5} {r['field']:<24} {r['a']:>12.2f} {r['b']:>12.2f} {ratio:>8}")
    return "\n".join(lines)
