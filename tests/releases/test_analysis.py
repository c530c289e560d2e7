"""Rollout step judgement: too few samples extends the step, never fails it; each rule fails
it on its own, and every failing rule is named."""

from __future__ import annotations

from fleetgate.releases.analysis import VersionWindow, judge_step
from fleetgate.releases.config import RolloutConfig

CFG = RolloutConfig()


def w(requests: int, failed: int = 0, latency: float = 100.0, **kw: float) -> VersionWindow:
    return VersionWindow(
        requests=requests, errors=failed, attempts=requests, failed_attempts=failed,
        latency_p95_ms=latency, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_too_few_samples_extends_never_fails() -> None:
    bad = w(5, failed=5, latency=9000.0)  # every request failed, but only five
    good = w(500)
    judged = judge_step(bad, good, CFG, min_samples=20)
    assert judged.verdict == "extend" and "too few samples" in judged.reason
    assert judge_step(good, w(3), CFG, min_samples=20).verdict == "extend"
    assert judge_step(w(19, failed=19), w(19), CFG, min_samples=20).verdict == "extend"
    assert judge_step(w(0), w(0), CFG, min_samples=1).verdict == "extend"  # no traffic at all


def test_errors_and_latency_fail_the_step() -> None:
    base = w(1000, failed=10)  # 1%
    assert judge_step(w(100, 3, 120.0), base, CFG, 50).verdict == "pass"  # 3% <= 1% + 2%
    failed = judge_step(w(100, 4, 120.0), base, CFG, 50)
    assert failed.verdict == "fail" and "error rate 4.0%" in failed.reason
    slow = judge_step(w(100, 0, 151.0), base, CFG, 50)
    assert slow.verdict == "fail" and "latency p95" in slow.reason
    assert judge_step(w(100, 0, 150.0), base, CFG, 50).verdict == "pass"
    both = judge_step(w(100, 10, 400.0), base, CFG, 50)
    assert "error rate" in both.reason and "latency p95" in both.reason


def test_failed_attempts_count_even_when_retries_hid_them() -> None:
    # 100 answered requests, 12 of which needed a second attempt: 12 / 112 failed attempts
    hidden = VersionWindow(requests=100, attempts=112, failed_attempts=12, latency_p95_ms=100.0)
    judged = judge_step(hidden, w(1000), CFG, 50)
    assert judged.verdict == "fail" and "error rate 10.7%" in judged.reason


def test_ttft_tpot_blocks_and_feedback() -> None:
    base = w(1000, ttft_p95_ms=200.0, tpot_p95_ms=20.0, ttft_samples=1000, tpot_samples=1000,
             blocked=10, feedback=100, negative=10)  # fmt: skip
    ok = w(100, ttft_p95_ms=220.0, tpot_p95_ms=21.0, ttft_samples=100, tpot_samples=100,
           blocked=2, feedback=40, negative=5)  # fmt: skip
    assert judge_step(ok, base, CFG, 50).verdict == "pass"
    cases = {
        "TTFT p95": {"ttft_p95_ms": 700.0},
        "TPOT p95": {"tpot_p95_ms": 45.0},
        "guardrail block rate": {"blocked": 6},
        "negative feedback": {"negative": 8},  # 20% > 10% + 5%
    }
    for words, change in cases.items():
        bad = VersionWindow(**{**ok.__dict__, **change})
        judged = judge_step(bad, base, CFG, 50)
        assert judged.verdict == "fail" and words in judged.reason, (words, judged.reason)
    # too few streams or verdicts: those rules are not judged, the step is not failed for it
    few = VersionWindow(**{**ok.__dict__, "ttft_p95_ms": 5000.0, "ttft_samples": 10,
                           "feedback": 5, "negative": 5})  # fmt: skip
    judged = judge_step(few, base, CFG, 50)
    assert judged.verdict == "pass", judged.reason
    assert "TTFT not judged" in judged.reason and "feedback not judged" in judged.reason
