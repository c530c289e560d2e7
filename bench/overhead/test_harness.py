"""Checks of the harness's own logic (not of anything's speed).

.venv/bin/python -m pytest bench/overhead
"""

from __future__ import annotations

from pathlib import Path

import alloc_counter
import calls
import memory
import report
import run
import tail
import targets
import upstream
import wrkrun

WRK_LINE = (
    'FGBENCH {"requests":1000,"duration_us":2000000,"bytes":1,"connect":0,"read":0,'
    '"write":0,"status":10,"timeout":2,"mean_us":900.5,"p50_us":800,"p90_us":1500,'
    '"p99_us":3000,"max_us":9000}'
)


def test_wrk_report_is_parsed_and_non_2xx_are_not_counted_as_completed() -> None:
    result = wrkrun.WrkResult.parse("Running 2s test\n" + WRK_LINE + "\n")
    assert result.completed == 990
    assert result.failed == 12
    assert result.request_throughput == 495.0
    assert result.median_e2el_ms == 0.8
    assert result.p99_e2el_ms == 3.0


def test_docs_update_replaces_only_its_own_section(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        "# Benchmarks\n\n## Routing\n\nkeep me\n\n"
        "## Gateway overhead\n\nold numbers\n\n## Capacity\n\nkeep me too\n"
    )
    report.update_docs(docs, "## Gateway overhead\n\nnew numbers\n")
    text = docs.read_text()
    assert "old numbers" not in text
    assert text.count("## Gateway overhead") == 1
    assert text.index("## Routing") < text.index("new numbers") < text.index("## Capacity")
    assert "keep me\n" in text and "keep me too" in text


def test_docs_update_appends_when_the_section_is_absent(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Routing\n\nkeep me\n")
    report.update_docs(docs, "## Gateway overhead\n\nnumbers\n")
    assert docs.read_text().endswith("keep me\n\n## Gateway overhead\n\nnumbers\n")


def test_docs_default_is_the_results_log_section() -> None:
    """`--write-docs` writes into the dated results log (docs/results/benchmarks.md), where this
    benchmark's section already is, not into the short current-figures page."""
    docs = run.parse_args([]).docs
    assert docs == run.REPO / "docs" / "results" / "benchmarks.md"
    assert "\n## Gateway overhead\n" in docs.read_text(encoding="utf-8")


def _result(rps: float, p50_ms: float) -> wrkrun.WrkResult:
    return wrkrun.WrkResult(100, 0, 1.0, rps, p50_ms, p50_ms, p50_ms, p50_ms, p50_ms)


def test_ratios_and_checks_use_medians_over_repetitions() -> None:
    runs = {
        ("direct", "json", 1): [_result(9000, 0.1)] * 3,
        ("fleetgate", "json", 1): [_result(3000, 0.5), _result(1, 9.0), _result(3000, 0.5)],
        ("fleetgate", "json", 64): [_result(2000, 5.0)] * 3,
        ("litellm", "json", 64): [_result(100, 600.0)] * 3,
        ("bare", "json", 64): [_result(2500, 4.0)] * 3,
    }
    med = report.medians(runs)
    ratio = report.ratios(med, ["direct", "bare", "fleetgate", "litellm"])
    assert ratio["fleetgate/litellm json c=64"] == 20.0
    assert ratio["fleetgate/bare json c=64"] == 0.8
    assert abs((ratio["added p50 ms fleetgate json c=1"] or 0) - 0.4) < 1e-9
    verdicts = {c.name: c.passed for c in report.checks(ratio, ["json"], 0.05, "x")}
    assert verdicts["fleetgate/litellm json c=64"] is False
    assert verdicts["fleetgate/bare json c=64"] is True
    assert verdicts["added p50 json c=1 (ms)"] is True
    assert verdicts["RSS growth x"] is True


def _latency(rps: float, p50_ms: float, p99_ms: float) -> wrkrun.WrkResult:
    return wrkrun.WrkResult(100, 0, 1.0, rps, p50_ms, p50_ms, p50_ms, p99_ms, p99_ms)


def test_p99_against_the_bare_relay_and_the_baseline_tree_are_checked() -> None:
    runs = {
        ("bare", "json", 64): [_latency(2500, 4.0, 10.0)] * 3,
        ("fleetgate", "json", 64): [_latency(2000, 5.0, 25.0)] * 3,
        ("baseline", "json", 64): [_latency(2200, 5.0, 40.0)] * 3,
        ("fleetgate", "json", 1): [_latency(900, 1.0, 2.0)] * 3,
        ("baseline", "json", 1): [_latency(950, 1.04, 2.0)] * 3,
    }
    ratio = report.ratios(report.medians(runs), ["bare", "fleetgate", "baseline"])
    assert ratio["p99 fleetgate/bare json c=64"] == 2.5
    assert ratio["p99 fleetgate/baseline json c=64"] == 0.625
    assert abs((ratio["fleetgate/baseline json c=64"] or 0) - 2000 / 2200) < 1e-9
    assert abs((ratio["p50 fleetgate/baseline json c=1"] or 0) - 1 / 1.04) < 1e-9
    verdicts = {c.name: c.passed for c in report.checks(ratio, ["json"], None, "x", True)}
    assert verdicts["p99 fleetgate/bare json c=64"] is False
    assert verdicts["fleetgate/baseline json c=64"] is False  # 0.91 < 0.95
    assert verdicts["p50 fleetgate/baseline json c=1"] is True
    without = {c.name for c in report.checks(ratio, ["json"], None, "x")}
    assert "fleetgate/baseline json c=64" not in without


def test_the_baseline_runs_from_its_own_source_tree(tmp_path: Path) -> None:
    argv, env = targets.fleetgate_command(tmp_path, "ignored --cmd", tmp_path / "src")
    assert argv[1:] == ["-m", "fleetgate.cli.main"]
    assert env == {"PYTHONPATH": str(tmp_path / "src")}


def test_rss_growth_is_measured_from_the_first_loaded_checkpoint() -> None:
    samples = [
        memory.MemorySample(0, 50.0),
        memory.MemorySample(10_000, 100.0),
        memory.MemorySample(100_000, 115.0),
    ]
    assert abs((memory.growth(samples) or 0) - 0.15) < 1e-9
    assert memory.growth(samples[:2]) is None


def test_upstream_streams_usage_only_when_asked() -> None:
    bodies = upstream.Bodies.build()
    assert b'"usage"' in bodies.sse_usage_event
    assert not any(b'"usage"' in event for event in bodies.sse_events)
    assert b'"usage"' in bodies.completion


def test_reproducing_command_leaves_out_the_note() -> None:
    shown = run.shown_args(["--reps", "2", "--note", "noisy box", "--write-docs", "--note=x"])
    assert shown == ["--reps", "2", "--write-docs"]


def test_a_chunk_costs_the_long_stream_minus_the_short_per_extra_event() -> None:
    assert calls.sse_chunks(1) == 10  # role, six words, finish, usage, [DONE]
    assert calls.sse_chunks(4) == 28
    assert calls._per(1000.0, 460.0, 18) == 30.0
    assert calls._per(None, 460.0, 18) is None
    results = {
        "this": {"json": {"calls": 90.0}, "sse": {}, "sse_chunk": {}},
        "baseline": {"json": {"calls": 100.0}, "sse": {}, "sse_chunk": {}},
    }
    row = next(r for r in calls.table(results, ["this", "baseline"]).splitlines() if "calls" in r)
    assert row.split()[-3:] == ["90", "100", "0.900"]


def test_the_allocation_counter_counts_what_is_allocated() -> None:
    counter = alloc_counter.load()
    if counter is None:  # no C compiler here: calls.py prints n/a
        return
    before = counter.read()
    made = [bytes(100) for _ in range(1000)]
    counted = counter.read() - before
    assert len(made) == 1000
    assert counted.allocs >= 1000 and counted.nbytes >= 100_000


def test_the_tail_summary_reads_cycles_background_and_slow_callbacks() -> None:
    """tail.py: CPU per request cycle at c=1, the background without request handling, and the
    stack samples that fall inside a slow callback."""
    starts = [[i * 0.001, i * 0.0005 + (0.004 if i == 150 else 0.0)] for i in range(300)]
    (cycles,) = tail._cycles(starts, 0.0, 1.0)
    assert "p50 0.500 ms" in cycles and "max 4.500" in cycles
    before = {
        "task RequestHandler._handle_request": [0, 0.0],
        "task SharedStates._poll": [2, 0.001],
    }
    after = {
        "task RequestHandler._handle_request": [90, 0.5],
        "task SharedStates._poll": [10, 0.003],
    }
    lines = tail._background(before, after, 2.0, 5)
    assert len(lines) == 2 and "4.0/s" in lines[1] and "1.00 ms/s" in lines[1]
    raw = {
        "slow": [[1.0, 0.002, "task X"]],
        "samples": [[0.5, ["a", "b"], []], [1.001, ["inside", "x"], ["thread"]]],
    }
    inside = tail._inside(raw, 0.0, 2.0, 5)
    assert inside[0].endswith("1 of 2") and "inside < x" in inside[1]


def test_the_baseline_against_itself_is_the_runs_noise() -> None:
    """--baseline-twice: the second baseline process's ratios to the first are printed as the
    noise of this run (what the same code scores against itself)."""
    runs = {
        ("fleetgate", "sse", 64): [_latency(2000, 5.0, 25.0)] * 3,
        ("baseline", "sse", 64): [_latency(2000, 5.0, 20.0)] * 3,
        ("baseline-again", "sse", 64): [_latency(1800, 5.5, 30.0)] * 3,
    }
    ratio = report.ratios(report.medians(runs), ["fleetgate", "baseline", "baseline-again"])
    assert ratio["noise: baseline-again/baseline sse c=64"] == 0.9
    assert ratio["noise: p99 baseline-again/baseline sse c=64"] == 1.5
    assert ratio["noise: p50 baseline-again/baseline sse c=64"] == 1.1
    args = run.parse_args(["--baseline-src", str(run.REPO / "src"), "--baseline-twice"])
    assert args.targets[-2:] == ["baseline", "baseline-again"]


def test_nice_is_an_option_and_nothing_is_reniced_without_it() -> None:
    assert run.parse_args(["--nice", "-10"]).nice == -10
    assert run.parse_args([]).nice is None
    run.prioritise(1, None)  # no niceness asked: touches nothing (not even pid 1)
