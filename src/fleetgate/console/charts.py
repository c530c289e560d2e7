"""Charts drawn on the server as inline SVG (no chart library in the browser)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart"]

_BAR = "#0b57d0"


def bar_chart(title: str, rows: Sequence[tuple[str, float]], unit: str = "") -> str:
    """A horizontal bar chart of ``(label, value)`` rows, largest first, as an SVG element
    with a title and a text alternative (``role="img"``)."""
    rows = sorted(rows, key=lambda r: r[1], reverse=True)[:20]
    top = max((v for _, v in rows), default=0.0) or 1.0
    label_w, bar_w, row_h = 220, 460, 22
    height = 30 + row_h * max(len(rows), 1)
    parts = [
        f'<svg class="chart" role="img" aria-labelledby="chart-title" '
        f'viewBox="0 0 {label_w + bar_w + 120} {height}" width="{label_w + bar_w + 120}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="chart-title">{escape(title)}</title>',
    ]
    if not rows:
        parts.append('<text x="10" y="40">No data in this range.</text>')
    for i, (label, value) in enumerate(rows):
        y = 20 + i * row_h
        width = max(1.0, bar_w * value / top) if value > 0 else 0.0
        shown = label if len(label) <= 32 else label[:31] + "…"
        amount = f"{unit}{value:,.6f}" if 0 < value < 0.01 else f"{unit}{value:,.4f}"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end">{escape(shown)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{width:.1f}" height="{row_h - 6}" '
            f'fill="{_BAR}"><title>{escape(label)}: {amount}</title></rect>'
            f'<text x="{label_w + width + 6:.1f}" y="{y + 15}">{amount}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
