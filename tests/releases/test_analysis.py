"""Rollout step judgement: too few samples extends the step, never fails it."""

from __future__ import annotations

from fleetgate.releases.analysis import Window, judge_step
from fleetgate.releases.config import RolloutConfig

CFG = RolloutConfig()


def test_too_few_samples_extends() -> None:
    bad = Window(requests=5, errors=5, latency_p95_ms=9000.0)
    good = Window(requests=500, errors=0, latency_p95_ms=100.0)
    judged = judge_step(bad, good, CFG, min_samples=20)
    assert judged.verdict == "extend" and "too few samples" in judged.reason
    assert judge_step(good, Window(3, 0, 100.0), CFG, min_samples=20).verdict == "extend"


def test_errors_and_latency_fail_the_step() -> None:
    base = Window(requests=1000, errors=10, latency_p95_ms=100.0)  # 1%
    assert judge_step(Window(100, 3, 120.0), base, CFG, 50).verdict == "pass"  # 3% <= 1% + 2%
    failed = judge_step(Window(100, 4, 120.0), base, CFG, 50)
    assert failed.verdict == "fail" and "error rate 4.0%" in failed.reason
    slow = judge_step(Window(100, 0, 151.0), base, CFG, 50)
    assert slow.verdict == "fail" and "latency p95" in slow.reason
    assert judge_step(Window(100, 0, 150.0), base, CFG, 50).verdict == "pass"
