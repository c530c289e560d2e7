"""Charts drawn on the server as inline SVG (no chart library in the browser)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart", "line_chart"]

_BAR = "#0b57d0"


def bar_chart(title: str, rows: Sequence[tuple[str, float]], unit: str = "") -> str:
    """A horizontal bar chart of ``(label, value)`` rows, largest first, as an SVG element
    with a title and a text alternative (``role="img"``)."""
    rows = sorted(rows, key=lambda r: r[1], reverse=True)[:20]
    top = max((v for _, v in rows), default=0.0) or 1.0
    label_w, bar_w, row_h = 220, 460, 22
    height = 30 + row_h * max(len(rows), 1)
    parts = [
        f'<svg class="chart-fixed" role="img" aria-labelledby="chart-title" '
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


# Okabe-Ito: told apart also with the common colour-vision deficiencies
_LINES = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#555555")


def _money(unit: str, value: float) -> str:
    return f"{unit}{value:,.6f}" if 0 < value < 0.01 else f"{unit}{value:,.2f}"


def line_chart(
    title: str,
    ticks: Sequence[str],
    lines: Sequence[tuple[str, Sequence[float]]],
    unit: str = "",
    *,
    chart_id: str = "chart-over-time",
) -> str:
    """A line per ``(name, values)`` over the periods named by ``ticks``, with a y axis from
    zero, a legend and a text alternative. Drawn at its real size (CSS px = SVG units, never
    scaled down), so its 12 px labels stay 12 px; a narrow window scrolls it sideways."""
    left, right, top, bottom = 90, 20, 30, 60
    plot_w, plot_h = max(360, min(900, 28 * len(ticks))), 240
    legend_h = 22 * len(lines)
    width, height = left + plot_w + right, top + plot_h + bottom + legend_h
    peak = max((max(values, default=0.0) for _, values in lines), default=0.0) or 1.0
    n = max(len(ticks), 1)

    def x(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / peak

    parts = [
        f'<svg class="chart-fixed" id="{chart_id}" role="img" aria-labelledby="{chart_id}-title" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-title">{escape(title)}</title>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        f'stroke="#4a5058"/>',
    ]
    for k in range(5):  # y axis: 0, 1/4, ..., peak
        v = peak * k / 4
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
            f"{escape(_money(unit, v))}</text>"
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" '
            f'stroke="#c9ced6" stroke-width="0.5"/>'
        )
    every = max(1, -(-len(ticks) // 12))  # at most about 12 period labels
    for i, tick in enumerate(ticks):
        if i % every == 0:
            parts.append(
                f'<text class="tick" x="{x(i):.1f}" y="{top + plot_h + 18}" '
                f'text-anchor="middle">{escape(tick)}</text>'
            )
    if not lines:
        parts.append(f'<text x="{left + 10}" y="{top + 20}">No spend in this range.</text>')
    for j, (name, values) in enumerate(lines):
        colour = _LINES[j % len(_LINES)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
            f"<title>{escape(name)}: {escape(_money(unit, sum(values)))} in all</title></polyline>"
        )
        for i, v in enumerate(values):
            if v > 0:
                parts.append(
                    f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(name)}, {escape(ticks[i])}: "
                    f"{escape(_money(unit, v))}</title></circle>"
                )
        ly = top + plot_h + bottom - 10 + 22 * j
        parts.append(
            f'<rect x="{left}" y="{ly - 10}" width="14" height="4" fill="{colour}"/>'
            f'<text class="legend" x="{left + 22}" y="{ly - 4}">{escape(name)} '
            f"({escape(_money(unit, sum(values)))})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
