"""A pipeline run's steps drawn as a timeline: one row per step, a bar from its start to its
finish (to now while it runs) on a common time axis, as inline SVG (the console's CSP allows no
inline styles; widths are SVG attributes). The steps table beside it carries the same figures
as text."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

__all__ = ["timeline_chart"]

# Okabe-Ito colours, told apart with the common colour-vision deficiencies; the status is also
# written after each bar, so colour is never the only sign
_FILL = {"done": "#0072b2", "running": "#e69f00", "failed": "#d55e00"}
_LABEL_W, _BAR_W, _ROW_H, _TAIL_W = 130, 520, 26, 170


def timeline_chart(steps: Sequence[dict[str, Any]], upcoming: Sequence[str] = ()) -> str:
    """The SVG of ``steps`` (rows of `fleetgate.console.pipelines.step_rows`), then the names
    of the ``upcoming`` steps, not begun, without a bar."""
    starts = [s["started_ms"] for s in steps if isinstance(s.get("started_ms"), int)]
    t0 = min(starts, default=0)
    ends = [s["started_ms"] + 1000 * (s["seconds"] or 0) for s in steps if s.get("started_ms")]
    span = max((max(ends, default=t0) - t0), 1.0)
    rows = len(steps) + len(upcoming)
    width, height = _LABEL_W + _BAR_W + _TAIL_W, 34 + _ROW_H * max(rows, 1)
    parts = [
        f'<svg class="chart-fixed" role="img" aria-labelledby="timeline-title" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg">',
        '<title id="timeline-title">Steps of the run on a time axis (the table below gives '
        "each step's times)</title>",
        f'<text x="{_LABEL_W}" y="14">0 s</text>',
        f'<text x="{_LABEL_W + _BAR_W}" y="14" text-anchor="end">{span / 1000:,.1f} s</text>',
    ]
    if not rows:
        parts.append('<text x="10" y="40">No step has begun yet.</text>')
    for i, step in enumerate(steps):
        y = 22 + i * _ROW_H
        seconds = step.get("seconds")
        begin = _BAR_W * (step["started_ms"] - t0) / span if step.get("started_ms") else 0.0
        bar = max(2.0, _BAR_W * 1000 * (seconds or 0) / span)
        status = str(step.get("status", ""))
        took = f"{seconds:,.2f} s" if seconds is not None else "-"
        parts.append(
            f'<text x="{_LABEL_W - 8}" y="{y + 16}" text-anchor="end">{escape(step["name"])}'
            f"</text>"
            f'<rect x="{_LABEL_W + begin:.1f}" y="{y + 4}" width="{bar:.1f}" '
            f'height="{_ROW_H - 8}" fill="{_FILL.get(status, "#555555")}">'
            f"<title>{escape(step['name'])}: {escape(status)}, {took}</title></rect>"
            f'<text x="{min(_LABEL_W + begin + bar + 6, _LABEL_W + _BAR_W + 6):.1f}" '
            f'y="{y + 16}">{escape(status)} {took}</text>'
        )
    for j, name in enumerate(upcoming):
        y = 22 + (len(steps) + j) * _ROW_H
        parts.append(
            f'<text x="{_LABEL_W - 8}" y="{y + 16}" text-anchor="end">{escape(name)}</text>'
            f'<text x="{_LABEL_W + 6}" y="{y + 16}">not begun</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
