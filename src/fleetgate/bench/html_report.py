"""``fleetgate bench --html``: one self-contained page, summary first.

The page opens with what a reader wants to know (the knee, the highest load meeting the SLO,
the peak throughput, the SLO itself), then the plots, inline as SVG, with the knee marked as a
vertical line and each SLO limit as a horizontal line on its metric's plot, then the table of
every point (the knee's row and the rows missing the SLO marked). No file beside it: styles
and plots are in the page.
"""

from __future__ import annotations

import html
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetgate.bench.profiles import ProfileResult
from fleetgate.bench.report import POINT_COLUMNS, load_axis, profile_json
from fleetgate.bench.slo import Slo
from fleetgate.extras import pyplot

__all__ = ["render_html", "write_html"]

_CSS = """
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1a1d21}
header{background:#14213d;color:#fff;padding:.7em 1.4em;font-weight:700}
main{padding:1.2em 1.6em;max-width:1200px}
h1{font-size:1.4em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.4em 0 .5em}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(13em,1fr));gap:.8em}
.card{background:#f4f6f8;border:1px solid #c9ced6;border-radius:6px;padding:.8em 1em}
.card strong{display:block;font-size:1.4em}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:1em}
.plots svg{max-width:100%;height:auto}
table{border-collapse:collapse;font:12px ui-monospace,monospace;font-variant-numeric:tabular-nums}
th,td{padding:.25em .5em;border-bottom:1px solid #c9ced6;text-align:right;white-space:nowrap}
th{background:#f4f6f8;position:sticky;top:0}
tr.knee td{background:#fff1c2}tr.miss td{color:#a4161a}
.scroll{overflow-x:auto}.muted{color:#4a5058}
"""

_PLOTS = (("ttft", "Time to first token"), ("e2el", "End-to-end latency"),
          ("tpot", "Time per output token"))  # fmt: skip


def _fmt(v: Any) -> str:
    if v is None:  # not measured (goodput without an SLO): a dash, never Python's None
        return "–"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return html.escape(str(v))


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]  # the XML prologue does not belong inside HTML


def _slo_lines(slo: Slo | None, metric: str) -> list[tuple[str, float]]:
    if slo is None:
        return []
    return [
        (field, limit) for field, limit in slo.limits.items() if field.endswith(f"_{metric}_ms")
    ]


def _plots(points: list[dict[str, Any]], knee: int | None, slo: Slo | None) -> list[str]:
    plt = pyplot("the HTML report's plots")
    order = sorted(range(len(points)), key=lambda i: load_axis(points[i]))
    xs = [load_axis(points[i]) for i in order]
    out = []
    for metric, title in _PLOTS:
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for p in ("p50", "p95", "p99"):
            ax.plot(xs, [points[i].get(f"{p}_{metric}_ms") for i in order], marker="o", label=p)
        for field, limit in _slo_lines(slo, metric):
            ax.axhline(limit, color="#a4161a", linestyle=":", label=f"SLO {field} {limit:g}")
        if knee is not None:
            ax.axvline(load_axis(points[knee]), color="#e8a200", linestyle="--", label="knee")
        ax.set(xlabel="achieved request throughput (req/s)", ylabel="ms", title=title)
        ax.legend(fontsize="small")
        out.append(_svg(fig))
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(xs, [points[i]["output_throughput"] for i in order], marker="o",
            label="output tokens/s")  # fmt: skip
    if knee is not None:
        ax.axvline(load_axis(points[knee]), color="#e8a200", linestyle="--", label="knee")
    ax.set(xlabel="achieved request throughput (req/s)", ylabel="output tokens/s",
           title="Throughput against load")  # fmt: skip
    ax.legend(fontsize="small")
    out.append(_svg(fig))
    plt.close(fig)
    return out


def _cards(data: Mapping[str, Any], slo: Slo | None) -> list[tuple[str, str]]:
    points, knee, best = data["points"], data["knee_index"], data["best"]
    cards = [("Points", str(len(points)))]
    if knee is not None:
        k = points[knee]
        at = f"{_fmt(load_axis(k))} req/s, p95 E2E {_fmt(k.get('p95_e2el_ms'))} ms"
        cards.append(("Knee (p95 E2E against throughput)", at))
    else:
        cards.append(("Knee", "none: the run never saturated"))
    if best is not None:
        cards.append(("Highest load meeting the SLO", f"{_fmt(best.get('offered_load'))}"))
    elif slo is not None:
        cards.append(("Highest load meeting the SLO", "none"))
    peak = max(points, key=lambda s: float(s.get("output_throughput", 0.0)), default=None)
    if peak is not None:
        cards.append(("Peak output throughput", f"{_fmt(peak.get('output_throughput'))} tok/s"))
    if slo is not None:
        limits = ", ".join(f"{k} ≤ {v:g}" for k, v in slo.limits.items())
        cards.append(("SLO", html.escape(limits) or "failures only"))
    return cards


def render_html(result: ProfileResult, slo: Slo | None = None) -> str:
    """The report page as one string (plots need matplotlib, extra ``bench``)."""
    data = profile_json(result)
    points, knee = data["points"], data["knee_index"]
    plots = _plots(points, knee, slo) if len(points) >= 2 else []
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("#", *POINT_COLUMNS))
    rows = []
    for i, s in enumerate(points):
        missed = slo is not None and not slo.met(s)
        cls = " ".join(c for c, on in (("knee", i == knee), ("miss", missed)) if on)
        cells = "".join(f"<td>{_fmt(s.get(c))}</td>" for c in POINT_COLUMNS)
        rows.append(f'<tr class="{cls}"><td>{i}</td>{cells}</tr>')
    cards = "".join(
        f'<div class="card">{t}<strong>{v}</strong></div>' for t, v in _cards(data, slo)
    )
    figures = "".join(f"<figure>{svg}</figure>" for svg in plots)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>fleetgate bench: {html.escape(result.profile)}</title><style>{_CSS}</style>"
        "</head><body><header>fleetgate bench</header><main>"
        f"<h1>Profile: {html.escape(result.profile)}</h1><div class='grid'>{cards}</div>"
        + (
            f"<h2>Latency and throughput against load</h2><div class='plots'>{figures}</div>"
            if figures
            else ""
        )  # fmt: skip
        + "<h2>Every point</h2><p class='muted'>The knee's row is highlighted; rows that miss "
        "the SLO are red.</p>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
        "</tbody></table></div></main></body></html>"
    )


def write_html(path: Path, result: ProfileResult, slo: Slo | None = None) -> list[Path]:
    """Write the report to ``path``; returns the other files written (none: it is
    self-contained)."""
    path.write_text(render_html(result, slo), encoding="utf-8")
    return []
