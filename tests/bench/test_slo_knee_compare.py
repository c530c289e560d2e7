"""SLO parsing and checks, knee detection, result comparison, progress bar."""

from __future__ import annotations

import io

import pytest

from fleetgate.bench import (
    Progress,
    compare,
    format_comparison,
    knee_index,
    make_progress,
    parse_slo,
)
from fleetgate.bench.progress import NullProgress
from fleetgate.errors import InvalidRequest


def test_slo_parse_and_check() -> None:
    slo = parse_slo("ttft_p95_ms=500, tpot_p95_ms=50,e2e_p99_ms=3000")
    assert slo.limits == {"p95_ttft_ms": 500, "p95_tpot_ms": 50, "p99_e2el_ms": 3000}
    assert slo.per_request_ms() == {"ttft": 500, "tpot": 50, "e2el": 3000}
    good = {
        "p95_ttft_ms": 400,
        "p95_tpot_ms": 40,
        "p99_e2el_ms": 2000,
        "completed": 100,
        "failed": 0,
    }
    assert slo.met(good)
    assert slo.violations({**good, "p95_ttft_ms": 600}) == ["p95_ttft_ms=600.0 > 500"]
    assert not slo.met({**good, "failed": 5})
    with pytest.raises(InvalidRequest):
        parse_slo("latency=5")


def test_knee() -> None:
    # farthest below the chord from first to last point: 40 req/s, where latency turns up
    assert knee_index([10, 20, 30, 40, 50], [100, 101, 103, 150, 400]) == 3
    assert knee_index([1, 2], [1, 2]) is None
    assert knee_index([1, 2, 3], [5, 5, 5]) is None
    # order of the inputs does not matter: the index refers to the input position
    assert knee_index([50, 10, 30, 20, 40], [400, 100, 103, 101, 150]) == 4


def test_compare_ratios() -> None:
    a = {"request_throughput": 10.0, "p99_ttft_ms": 100.0, "failed": 0}
    b = {"request_throughput": 12.0, "p99_ttft_ms": 50.0, "failed": 1}
    rows = {r["field"]: r for r in compare(a, b)}
    assert rows["request_throughput"]["ratio"] == pytest.approx(1.2)
    assert rows["p99_ttft_ms"]["ratio"] == pytest.approx(0.5)
    assert rows["failed"]["ratio"] is None
    assert "1.200" in format_comparison(list(rows.values()))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    assert isinstance(make_progress(False, io.StringIO()), NullProgress)
    assert isinstance(make_progress(True, _Tty()), NullProgress)
    out = _Tty()
    bar = make_progress(False, out)
    assert isinstance(bar, Progress)
    bar.start(4, "test")
    for ok in (True, True, False, True):
        bar.update(ok)
    bar.close()
    assert "4/4" in out.getvalue() and "failed 1" in out.getvalue()
