"""``fleetgate plan`` prints the worked example, writes JSON and a plot, calibrates from bench."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from fleetgate.cli import plan as plan_cli

WORKED = [
    "plan",
    "--dau",
    "1000000",
    "--conversations",
    "3",
    "--turns",
    "5",
    "--active-hours",
    "8",
    "--peak-factor",
    "3",
    "--input-tokens",
    "2000",
    "--output-tokens",
    "500",
    "--gpu-tokens-per-s",
    "4000",
    "--gpu-price",
    "3",
]


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fleetgate")
    plan_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_worked_example_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "plan.json", tmp_path / "plan.png"
    assert _main([*WORKED, "--round-gpus-to", "100", "--json", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "520.83" in text and "2,160,000" in text
    data = orjson.loads(out.read_bytes())
    assert data["gpus_peak"] == 1000 and data["qps_avg"] == pytest.approx(520.8333, abs=1e-3)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plan_from_bench_result(tmp_path: Path) -> None:
    result = {
        "points": [
            {
                "offered_load": 1,
                "completed": 10,
                "request_throughput": 1.0,
                "total_token_throughput": 500.0,
                "p95_ttft_ms": 50.0,
                "mean_e2el_ms": 400.0,
            },
            {
                "offered_load": 8,
                "completed": 80,
                "request_throughput": 8.0,
                "total_token_throughput": 4000.0,
                "p95_ttft_ms": 90.0,
                "mean_e2el_ms": 450.0,
            },
            {
                "offered_load": 20,
                "completed": 100,
                "request_throughput": 12.0,
                "total_token_throughput": 6000.0,
                "p95_ttft_ms": 900.0,
                "mean_e2el_ms": 900.0,
            },
        ]
    }
    f = tmp_path / "bench.json"
    f.write_bytes(orjson.dumps(result))
    out = tmp_path / "p.json"
    rc = _main(
        [
            *WORKED,
            "--from-bench",
            str(f),
            "--bench-gpus",
            "2",
            "--slo",
            "ttft_p95_ms=100",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    data = orjson.loads(out.read_bytes())
    # best point meeting the SLO: 4000 tok/s on 2 GPUs = 2000 per GPU
    assert data["gpu_tokens_per_s"] == 2000.0
    assert data["gpus_avg_exact"] == pytest.approx(1_302_083.33 / 2000, rel=1e-6)


def test_unmeetable_slo_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bench.json"
    f.write_bytes(
        orjson.dumps(
            {
                "completed": 1,
                "request_throughput": 1.0,
                "failed": 0,
                "total_token_throughput": 10.0,
                "p95_ttft_ms": 500.0,
                "mean_e2el_ms": 600.0,
            }
        )
    )
    assert _main([*WORKED, "--from-bench", str(f), "--slo", "ttft_p95_ms=100"]) == 2
    assert "SLO" in capsys.readouterr().err
