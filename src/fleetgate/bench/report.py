"""Write results: JSON (``vllm bench serve`` names) and CSV (the HTML page: ``html_report``).

A single-point run writes its summary as one JSON object (the same shape as ``vllm bench serve
--save-result``); a multi-point run writes ``{"profile", "points": [...], "knee_index",
"best"}``. The CSV holds one row per request for a single point and one row per point otherwise.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from fleetgate.bench.knee import knee_index
from fleetgate.bench.metrics import RATE_FIELDS
from fleetgate.bench.point import PointResult
from fleetgate.bench.profiles import ProfileResult
from fleetgate.csv_export import inert_cell

__all__ = [
    "POINT_COLUMNS",
    "load_axis",
    "profile_json",
    "write_csv",
    "write_json",
]

POINT_COLUMNS = (
    "load_kind",
    "offered_load",
    "completed",
    "failed",
    "duration",
    *RATE_FIELDS,
    "mean_ttft_ms",
    "p50_ttft_ms",
    "p95_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p95_tpot_ms",
    "p99_tpot_ms",
    "p95_itl_ms",
    "p95_itl_per_token_ms",
    "p50_e2el_ms",
    "p95_e2el_ms",
    "p99_e2el_ms",
    "p99_schedule_lag_ms",
    "max_schedule_lag_ms",
)


def load_axis(summary: dict[str, Any]) -> float:
    """The x value of a point: achieved request throughput (comparable across load kinds)."""
    return float(summary.get("request_throughput", 0.0))


def profile_json(result: ProfileResult) -> dict[str, Any]:
    """The JSON object of a multi-point run, knee marked on p95 E2E latency."""
    points = [p.summary for p in result.points]
    knee = knee_index([load_axis(s) for s in points], [s["p95_e2el_ms"] for s in points])
    return {"profile": result.profile, "points": points, "knee_index": knee, "best": result.best}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON."""
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def write_csv(path: Path, points: Sequence[PointResult]) -> None:
    """Per-request rows for one point, per-point rows for several."""
    with path.open("w", newline="") as fh:
        if len(points) == 1:
            rows = [r.to_row() for r in points[0].records]
            cols = list(rows[0]) if rows else ["index"]
        else:
            rows = [{c: p.summary.get(c) for c in POINT_COLUMNS} for p in points]
            cols = list(POINT_COLUMNS)
        writer = csv.DictWriter(fh, fieldnames=cols)
        writer.writeheader()
        writer.writerows({c: inert_cell(r.get(c)) for c in cols} for r in rows)
