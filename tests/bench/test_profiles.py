"""Sweep and search pick their loads from what they measured; trace replay keeps timestamps."""

from __future__ import annotations

from typing import Any

from fleetgate.bench import (
    LoadPoint,
    PointOptions,
    PointResult,
    RequestSpec,
    Target,
    parse_slo,
    run_point,
    search,
    sweep,
)
from tests.bench.upstream import Upstream, serve

OPTS = PointOptions(target=Target("http://127.0.0.1:9/v1", model="m"), pool=[])


def _fake(capacity: float, log: list[LoadPoint]) -> Any:
    """A fleet that serves up to `capacity` req/s; latency explodes beyond 80 % of it."""

    def runner(opts: PointOptions, point: LoadPoint) -> PointResult:
        log.append(point)
        load = capacity if point.kind == "concurrency" and point.value > 1 else point.value
        if point.kind == "concurrency" and point.value == 1:
            load = 10.0
        ttft = 100.0 if load <= 0.8 * capacity else 1000.0
        s = {
            "request_throughput": min(load, capacity),
            "offered_load": point.value,
            "p95_ttft_ms": ttft,
            "completed": 10,
            "failed": 0,
        }
        return PointResult(s, [])

    return runner


def test_sweep_goes_from_synchronous_to_saturation() -> None:
    log: list[LoadPoint] = []
    res = sweep(OPTS, 5, 1.0, LoadPoint("rate"), runner=_fake(100.0, log))
    assert [p.kind for p in log][:2] == ["concurrency", "concurrency"]
    rates = [p.value for p in log[2:]]
    assert rates == [32.5, 55.0, 77.5]  # evenly between 10 (sync) and 100 (saturation)
    assert len(res.points) == 5


def test_search_finds_the_highest_rate_meeting_the_slo() -> None:
    log: list[LoadPoint] = []
    res = search(
        OPTS,
        parse_slo("ttft_p95_ms=200"),
        1.0,
        LoadPoint("rate"),
        start=10.0,
        iterations=8,
        runner=_fake(100.0, log),
    )
    assert res.best is not None
    assert 70.0 <= res.best["offered_load"] <= 80.0
    assert len(log) <= 8 + 4


def test_trace_replay_sends_on_the_trace_timestamps() -> None:
    specs = [RequestSpec("a b", 2, 1, at=t) for t in (0.0, 0.05, 0.2)]
    with serve(Upstream()) as url:
        opts = PointOptions(target=Target(url, model="m"), pool=specs)
        res = run_point(opts, LoadPoint("trace", max_requests=3))
    assert [r.intended for r in res.records] == [0.0, 0.05, 0.2]
    assert res.summary["completed"] == 3
    assert all(0 <= r.lag < 0.05 for r in res.records)
