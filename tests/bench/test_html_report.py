"""The ``--html`` report: one file, summary first, SLO limits drawn and missed rows marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetgate.bench.html_report import write_html
from fleetgate.bench.point import PointResult
from fleetgate.bench.profiles import ProfileResult
from fleetgate.bench.report import POINT_COLUMNS
from fleetgate.bench.slo import parse_slo

pytest.importorskip("matplotlib")


def _point(rate: float, p95_e2e: float) -> PointResult:
    summary: dict[str, Any] = {c: 1.0 for c in POINT_COLUMNS}
    summary.update(load_kind="rate", offered_load=rate, request_throughput=rate, completed=100,
                   failed=0, output_throughput=rate * 50, p95_e2el_ms=p95_e2e,
                   p50_ttft_ms=20.0, p95_ttft_ms=30.0 + p95_e2e / 10, p99_ttft_ms=40.0)  # fmt: skip
    return PointResult(summary, [])


def test_the_report_is_one_file_with_the_slo_and_the_knee_marked(tmp_path: Path) -> None:
    points = [_point(r, e) for r, e in ((1, 100), (2, 110), (4, 130), (8, 900), (16, 4000))]
    result = ProfileResult("stepped", points, best={"offered_load": 4.0})
    slo = parse_slo("ttft_p95_ms=100,e2el_p95_ms=1000")
    assert write_html(tmp_path / "r.html", result, slo) == []
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    page = (tmp_path / "r.html").read_text()
    assert page.index("Highest load meeting the SLO") < page.index("<svg")
    assert "p95_ttft_ms ≤ 100" in page and "SLO p95_ttft_ms 100" in page  # card and line
    assert page.count('class="miss"') + page.count('class="knee miss"') == 2  # 8 and 16 req/s
    assert page.count("knee") >= 2 and "<img" not in page
