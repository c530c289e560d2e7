"""Write results: JSON (``vllm bench serve`` names), CSV, and an HTML page with PNG plots.

A single-point run writes its summary as one JSON object (the same shape as ``vllm bench serve
--save-result``); a multi-point run writes ``{"profile", "points": [...], "knee_index",
"best"}``. The CSV holds one row per request for a single point and one row per point otherwise.
"""

from __future__ import annotations

import csv
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from fleetgate.bench.knee import knee_index
from fleetgate.bench.point import PointResult
from fleetgate.bench.profiles import ProfileResult
from fleetgate.extras import pyplot

__all__ = [
    "POINT_COLUMNS",
    "load_axis",
    "profile_json",
    "write_csv",
    "write_html",
    "write_json",
]

POINT_COLUMNS = (
    "load_kind",
    "offered_load",
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "request_goodput",
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
        writer.writerows(rows)


def _plots(out_dir: Path, stem: str, points: list[dict[str, Any]], knee: int | None) -> list[str]:
    plt = pyplot("the HTML report's plots")

    order = sorted(range(len(points)), key=lambda i: load_axis(points[i]))
    xs = [load_axis(points[i]) for i in order]
    names = []
    for metric, title in (("ttft", "TTFT"), ("e2el", "E2E latency"), ("tpot", "TPOT")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for p in ("p50", "p95", "p99"):
            ax.plot(xs, [points[i][f"{p}_{metric}_ms"] for i in order], marker="o", label=p)
        if knee is not None:
            ax.axvline(load_axis(points[knee]), color="red", linestyle="--", label="knee")
        ax.set(
            xlabel="achieved request throughput (req/s)",
            ylabel="ms",
            title=f"{title} percentiles against load",
        )
        ax.legend()
        name = f"{stem}_{metric}.png"
        fig.savefig(out_dir / name, dpi=90, bbox_inches="tight")
        plt.close(fig)
        names.append(name)
    fig, ax = plt.subplots(figsize=(7, 4))
    offered = [float(points[i]["offered_load"]) for i in order]
    ax.plot(
        xs, [points[i]["output_throughput"] for i in order], marker="o", label="output tokens/s"
    )
    if knee is not None:
        ax.axvline(load_axis(points[knee]), color="red", linestyle="--", label="knee")
    ax.set(
        xlabel="achieved request throughput (req/s)",
        ylabel="output tokens/s",
        title="Throughput against load (offered: " + ", ".join(f"{o:g}" for o in offered) + ")",
    )
    ax.legend()
    name = f"{stem}_throughput.png"
    fig.savefig(out_dir / name, dpi=90, bbox_inches="tight")
    plt.close(fig)
    names.append(name)
    return names


def write_html(path: Path, result: ProfileResult) -> list[Path]:
    """An HTML page (a table of points and PNG plots next to it); returns the PNG paths."""
    data = profile_json(result)
    points, knee = data["points"], data["knee_index"]
    images = _plots(path.parent, path.stem, points, knee) if len(points) >= 2 else []
    head = "".join(f"<th>{html.escape(c)}</th>" for c in POINT_COLUMNS)
    body = []
    for i, s in enumerate(points):
        cells = "".join(f"<td>{_fmt(s.get(c))}</td>" for c in POINT_COLUMNS)
        mark = ' style="background:#fdd"' if i == knee else ""
        body.append(f"<tr{mark}>{cells}</tr>")
    imgs = "".join(f'<p><img src="{html.escape(n)}" alt="{html.escape(n)}"></p>' for n in images)
    best = ""
    if data["best"] is not None:
        best = f"<p>Highest load meeting the SLO: {_fmt(data['best']['offered_load'])}</p>"
    knee_txt = "none found" if knee is None else f"point {knee} (highlighted)"
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>fleetgate bench</title>"
        "<style>td,th{padding:2px 6px;border:1px solid #ccc;font:12px monospace}</style>"
        f"</head><body><h1>fleetgate bench: {html.escape(result.profile)}</h1>"
        f"<p>Knee (p95 E2E latency against achieved throughput): {knee_txt}</p>{best}"
        f"<table><tr>{head}</tr>{''.join(body)}</table>{imgs}</body></html>"
    )
    return [path.parent / n for n in images]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return html.escape(str(v))
