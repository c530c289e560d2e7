"""``fleetgate bench`` as a user meets it: the key from the environment the README exports, an
early stop with a clear message when every request fails, no knee where nothing saturated, no
``None`` in the report."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pytest

from fleetgate.bench.knee import knee_index
from fleetgate.bench.point import PointResult
from fleetgate.bench.profiles import ProfileResult
from fleetgate.bench.report import POINT_COLUMNS
from fleetgate.bench.runner import FAIL_FAST
from fleetgate.cli import bench as bench_cli
from tests.bench.upstream import Upstream, serve

SMALL = ["--input-len", "8", "--output-len", "2", "--quiet"]


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fleetgate")
    bench_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_the_key_comes_from_fleetgate_master_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEETGATE_MASTER_KEY", "sk-fg-master-x")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-other")
    up = Upstream(require_key="sk-fg-master-x")
    with serve(up) as url:
        rc = _main(["bench", url, "--model", "m", "--rate", "inf", "--num-requests", "5", *SMALL])
    assert rc == 0, capsys.readouterr().err
    assert "completed                                5" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["--rate", "--concurrency"])
def test_every_request_failing_stops_early_with_the_reason(
    kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLEETGATE_MASTER_KEY", raising=False)
    up = Upstream(require_key="sk-right")
    value = "20" if kind == "--rate" else "4"
    started = time.monotonic()
    with serve(up) as url:
        rc = _main(["bench", url, "--model", "m", "--api-key", "sk-wrong", kind, value,
                    "--num-requests", "1000", "--duration", "60", *SMALL])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert "every request failed" in err and "HTTP 401" in err and "--api-key" in err
    assert up.count < FAIL_FAST + 25  # stopped after the first answers, not 1,000 requests
    assert time.monotonic() - started < 30  # not the 60 s asked for


def test_a_profile_stops_at_the_first_point_that_only_failed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    up = Upstream(fail_every=1)
    with serve(up) as url:
        rc = _main(["bench", url, "--model", "m", "--steps", "5,10,20", "--step-duration", "20",
                    *SMALL])  # fmt: skip
    assert rc == 2 and "every request failed" in capsys.readouterr().err
    assert up.count <= FAIL_FAST + 10


def test_a_run_that_never_saturated_has_no_knee() -> None:
    flat = [100.0, 101.0, 99.0, 103.0, 104.0, 120.0]  # noise, and a last point 20 % up
    assert knee_index([1, 2, 4, 8, 16, 32], flat) is None
    assert knee_index([10, 20, 30, 40, 50], [100, 101, 103, 150, 400]) == 3  # saturated


def test_the_report_prints_no_none(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from fleetgate.bench.html_report import render_html

    def point(rate: float) -> PointResult:
        s: dict[str, Any] = {c: float(rate) for c in POINT_COLUMNS}
        s.update(load_kind="rate", completed=10, failed=0, request_goodput=None,
                 p95_e2el_ms=100.0 + rate)  # fmt: skip
        return PointResult(s, [])

    page = render_html(ProfileResult("stepped", [point(1), point(2), point(4)]))
    assert "None" not in page
    assert "never saturated" in page
