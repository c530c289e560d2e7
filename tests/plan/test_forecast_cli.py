"""``fleetgate plan forecast`` end to end: CSV and store in, plan out, saved, calibrated."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.cli.main import main
from fleetgate.plan.calibration import calibration_report
from fleetgate.plan.forecast import MONTH_H
from fleetgate.plan.history import HourlyHistory, format_hour, parse_hour, write_history_csv
from fleetgate.plan.synthetic import synthetic_history
from fleetgate.store.database import Database, database_url
from fleetgate.tenancy.tables import spend

START = parse_hour("2026-02-02T00:00:00Z")


@pytest.fixture
def history_csv(tmp_path: Path) -> tuple[Path, Path]:
    history, events = synthetic_history(start=START, days=90, requests_per_hour=20_000.0,
                                        events=[("sale", 20, 2, 2.0)], seed=31)  # fmt: skip
    path = tmp_path / "history.csv"
    path.write_text(write_history_csv(history))
    ev = tmp_path / "events.json"
    ev.write_bytes(orjson.dumps({
        "events": [{"name": e.name, "kind": e.kind, "start": format_hour(e.start),
                    "end": format_hour(e.end)} for e in events],
        "business_lines": [{"name": "bot", "start": format_hour(START + 90 * 24 + MONTH_H),
                            "requests_per_day": 240_000, "input_tokens": 1000,
                            "output_tokens": 200}],
    }))  # fmt: skip
    return path, ev


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    return orjson.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_forecast_from_csv_with_backtest_and_business_line(
    history_csv: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, events = history_csv
    out = _json(capsys, ["plan", "forecast", "--history", str(path), "--events", str(events),
                         "--months", "3", "--backtest", "--gpu-tokens-per-s", "2000",
                         "--redundancy", "1.2", "--current-gpus", "8", "--batch-size", "4",
                         "--lead-time-weeks", "4", "--json", "-"])  # fmt: skip
    assert out["backtest"]["wape_requests"] < 0.2  # type: ignore[index]
    growth = out["fit"]["growth_per_month"]["chat"]  # type: ignore[index]
    assert 0.03 < growth < 0.13  # the synthetic default is 8 %
    months = out["purchase"]["months"]  # type: ignore[index]
    assert len(months) == 3
    # the business line starts in month 1: its 240,000 requests a day jump the requests
    assert months[1]["requests"] > months[0]["requests"] + 0.8 * 240_000 * 30
    assert months[2]["gpus_peak"] > months[0]["gpus_peak"]
    assert all(o["gpus"] % 4 == 0 for o in out["purchase"]["orders"])  # type: ignore[index]
    assert main(["plan", "forecast", "--history", str(path), "--months", "1"]) == 0
    text = capsys.readouterr().out
    assert "growth per month: chat +" in text and "order " in text


def test_save_then_calibrate_adjusts_redundancy(
    history_csv: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, events = history_csv
    saved = tmp_path / "fc.json"
    cut = format_hour(START + 60 * 24)
    assert main(["plan", "forecast", "--history", str(path), "--until", cut, "--events",
                 str(events), "--months", "1", "--redundancy", "1.2", "--save", str(saved),
                 "--json", "-"]) == 0  # fmt: skip
    capsys.readouterr()
    out = _json(capsys, ["plan", "forecast", "--history", str(path), "--since", cut,
                         "--calibrate", str(saved), "--json", "-"])  # fmt: skip
    cal = out["calibration"]
    assert cal["hours"] == 30 * 24 and cal["wape_tokens"] < 0.2  # type: ignore[index]
    assert out["redundancy"] == cal["suggested_redundancy"]  # type: ignore[index]


def test_calibration_moves_redundancy_half_way() -> None:
    hours = 48
    h = HourlyHistory.from_rows([(START + i, "a", 10.0, 1000.0 * (2 if i == 5 else 1), 0.0)
                                 for i in range(hours)])  # fmt: skip
    saved = {"start": START, "hours": hours, "redundancy": 1.2, "gpu_tokens_per_s": 1.0,
             "totals": {"requests": [10.0] * hours, "input_tokens": [1000.0] * hours,
                        "output_tokens": [0.0] * hours}}  # fmt: skip
    report = calibration_report(saved, h)
    assert report["peak_ratio"] == pytest.approx(2.0)
    assert report["suggested_redundancy"] == pytest.approx(1.2 * 1.5)
    low = dict(saved, totals={**saved["totals"], "input_tokens": [4000.0] * hours})  # type: ignore[dict-item]
    assert calibration_report(low, h)["suggested_redundancy"] == 1.0  # never below 1


def test_forecast_from_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history, _ = synthetic_history(start=START, days=21, requests_per_hour=3.0, seed=4)
    rows = []
    for i, n in enumerate(history.total("requests")):
        for j in range(int(n)):
            rows.append({"request_id": f"r{i}-{j}", "created_ms": (START + i) * 3_600_000 + j,
                         "key_id": "k", "team_id": "t", "alias": "chat", "deployment": "d",
                         "version": "v1", "status": 200, "input_tokens": 100,
                         "output_tokens": 20, "cached_tokens": 0, "cost_nusd": 1,
                         "latency_ms": 1, "tags": {}})  # fmt: skip

    async def fill() -> None:
        db = Database(database_url(None, tmp_path), migrations=MIGRATIONS)
        await db.migrate()
        await db.insert_ignore(spend, rows)
        await db.aclose()

    asyncio.run(fill())
    out = _json(capsys, ["plan", "forecast", "--data-dir", str(tmp_path), "--months", "1",
                         "--json", "-"])  # fmt: skip
    assert out["history"]["aliases"] == ["chat"]  # type: ignore[index]
    csv_path = tmp_path / "export.csv"
    assert (
        main(["plan", "forecast", "--data-dir", str(tmp_path), "--export-csv", str(csv_path)]) == 0
    )
    assert csv_path.read_text().startswith("hour,alias,requests,input_tokens,output_tokens\n")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--lead-time-weeks", "2"], "lead_time_weeks must be within 4..12"),
        (["--months", "0"], "--months must be >= 1"),
        (["--alias", "nope"], "no history for alias nope"),
        (["--event", "x,promo,2026-01-01"], "NAME,KIND,START,END"),
        (["--from-bench", "/nonexistent.json"], "nonexistent"),
        (["--since", "2030-01-01"], "leave no hours"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    history_csv: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    match: str,
) -> None:
    path, _ = history_csv
    assert main(["plan", "forecast", "--history", str(path), *extra]) == 2
    assert match in capsys.readouterr().err


def test_bad_events_file_and_plan_without_dau(
    tmp_path: Path, history_csv: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "events.json"
    bad.write_text('{"events": [{"name": "x", "start": "2026-01-02", "end": "2026-01-01"}]}')
    assert main(["plan", "forecast", "--history", str(history_csv[0]), "--events", str(bad)]) == 2
    assert "events[0]: 'end' must be after 'start'" in capsys.readouterr().err
    assert main(["plan"]) == 2
    assert "--dau is required" in capsys.readouterr().err
    empty = tmp_path / "nothing-here"
    assert main(["plan", "forecast", "--data-dir", str(empty)]) == 2
    assert "no gateway store under" in capsys.readouterr().err
    assert not empty.exists()
    unmigrated = tmp_path / "bare"
    unmigrated.mkdir()
    (unmigrated / "fleetgate.db").write_bytes(b"")
    assert main(["plan", "forecast", "--data-dir", str(unmigrated)]) == 2
    assert "cannot read the spend table" in capsys.readouterr().err


def test_per_gpu_capacity_from_a_bench_result(
    history_csv: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def point(load: float, tput: float, ttft: float) -> dict[str, float]:
        return {"offered_load": load, "completed": 10, "request_throughput": load,
                "total_token_throughput": tput, "p95_ttft_ms": ttft,
                "mean_e2el_ms": 400.0}  # fmt: skip

    bench = tmp_path / "bench.json"
    bench.write_bytes(orjson.dumps({"points": [point(1, 500, 50), point(8, 4000, 90),
                                               point(20, 6000, 900)]}))  # fmt: skip
    path, _ = history_csv
    common = ["plan", "forecast", "--history", str(path), "--months", "1", "--json", "-"]
    out = _json(capsys, [*common, "--from-bench", str(bench), "--bench-gpus", "2",
                         "--slo", "ttft_p95_ms=100"])  # fmt: skip
    assert out["gpu_tokens_per_s"] == 2000.0  # 4,000 tokens/s on 2 GPUs, the point in the SLO
    typed = _json(capsys, [*common, "--gpu-tokens-per-s", "2000"])
    assert out["purchase"]["months"] == typed["purchase"]["months"]  # type: ignore[index]
    half = _json(capsys, [*common, "--gpu-tokens-per-s", "1000"])
    gpus = [m["purchase"]["months"][0]["gpus_peak"] for m in (out, half)]  # type: ignore[index]
    assert gpus[1] >= 2 * gpus[0] - 1
