"""``fleetgate bench`` end to end: stepped run, JSON/CSV/HTML outputs, compare, search."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import orjson
import pytest

from fleetgate.cli import bench as bench_cli
from tests.bench.upstream import Upstream, serve


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fleetgate")
    sub = parser.add_subparsers()
    bench_cli.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_single_point_json_uses_vllm_field_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    with serve(Upstream(gap_ms=1)) as url:
        rc = _main(
            [
                "bench",
                url,
                "--rate",
                "100",
                "--num-requests",
                "20",
                "--input-len",
                "8",
                "--output-len",
                "3",
                "--output-json",
                str(out),
                "--output-csv",
                str(tmp_path / "r.csv"),
                "--quiet",
                "--slo",
                "ttft_p95_ms=1000",
            ]
        )
    assert rc == 0
    data = orjson.loads(out.read_bytes())
    for key in (
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99_ttft_ms",
        "p99_tpot_ms",
        "p95_itl_ms",
        "p99_e2el_ms",
        "completed",
        "failed",
        "duration",
        "total_input_tokens",
        "total_output_tokens",
        "request_goodput",
        "p99_schedule_lag_ms",
        "request_rate",
        "burstiness",
        "max_concurrency",
    ):
        assert key in data, key
    assert data["completed"] == 20 and data["request_goodput"] > 0
    assert data["model_id"] == "up-model"  # no --model: the first of GET /v1/models
    with (tmp_path / "r.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 20 and "schedule_lag_ms" in rows[0]
    assert "Serving Benchmark Result" in capsys.readouterr().out


def test_stepped_run_writes_html_with_plots_and_compare_prints_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    with serve(Upstream(first_ms=2)) as url:
        common = [
            "--num-requests",
            "200",
            "--input-len",
            "8",
            "--output-len",
            "2",
            "--quiet",
            "--step-duration",
            "0.3",
            "--arrival",
            "constant",
        ]
        assert (
            _main(
                [
                    "bench",
                    url,
                    "--steps",
                    "20,40,80",
                    "--output-json",
                    str(a),
                    "--html",
                    str(tmp_path / "rep.html"),
                    *common,
                ]
            )
            == 0
        )
        assert _main(["bench", url, "--steps", "20,40,80", "--output-json", str(b), *common]) == 0
    data = orjson.loads(a.read_bytes())
    assert data["profile"] == "stepped" and len(data["points"]) == 3
    assert [p["offered_load"] for p in data["points"]] == [20.0, 40.0, 80.0]
    html = (tmp_path / "rep.html").read_text()
    assert html.count("<svg") == 4 and "knee" in html  # plots inline, the knee marked
    assert html.index("Knee") < html.index("<svg") < html.index("<table")  # summary first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "rep.html"]
    capsys.readouterr()
    assert _main(["bench", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "request_throughput" in out and "B/A" in out


def test_goodput_search_finds_a_passing_rate(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    with serve(Upstream(first_ms=1)) as url:
        rc = _main(
            [
                "bench",
                url,
                "--search",
                "rate",
                "--slo",
                "e2el_p99_ms=2000",
                "--search-start",
                "10",
                "--search-iterations",
                "1",
                "--step-duration",
                "0.2",
                "--num-requests",
                "40",
                "--input-len",
                "4",
                "--output-len",
                "1",
                "--quiet",
                "--output-json",
                str(out),
            ]
        )
    assert rc == 0
    data = orjson.loads(out.read_bytes())
    assert data["best"] is not None and data["best"]["slo_met"]
    assert all(
        p["slo_met"] for p in data["points"] if p["offered_load"] <= data["best"]["offered_load"]
    )


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["bench", "compare", "only-one.json"]) == 2
    assert _main(["bench", "http://127.0.0.1:9/v1", "--model", "m", "--input-len", "bogus:1"]) == 2
    assert "length" in capsys.readouterr().err
