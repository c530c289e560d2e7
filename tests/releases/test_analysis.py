"""Rollout step judgement: too few samples extends the step, never fails it; each rule fails
it on its own, and every failing rule is named."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

from fleetgate.releases.analysis import VersionWindow, judge_step
from fleetgate.releases.config import RolloutConfig
from fleetgate.releases.windows import hist_bin, window_of

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
    # 4% of 100 is over 1% + 2%, but not significantly: extended, not failed
    unsure = judge_step(w(100, 4, 120.0), base, CFG, 50)
    assert unsure.verdict == "inconclusive" and "not significantly" in unsure.reason
    failed = judge_step(w(1000, 60, 120.0), base, CFG, 50)  # 6% of 1000: significant
    assert failed.verdict == "fail" and "error rate 6.0%" in failed.reason
    slow = judge_step(w(100, 0, 151.0), base, CFG, 50)
    assert slow.verdict == "fail" and "latency p95" in slow.reason
    assert judge_step(w(100, 0, 150.0), base, CFG, 50).verdict == "pass"
    both = judge_step(w(300, 30, 400.0), base, CFG, 50)
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
    cases: dict[str, dict[str, float]] = {
        "TTFT p95": {"ttft_p95_ms": 700.0},
        "TPOT p95": {"tpot_p95_ms": 45.0},
        "guardrail block rate": {"blocked": 12},  # 12% of 100 > 1% + 2%, significantly
        "negative feedback": {"negative": 18},  # 45% of 40 > 10% + 5%, significantly
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


def _hist(values: list[float]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ms in values:
        k = str(hist_bin(ms))
        out[k] = out.get(k, 0) + 1
    return out


def _window(rng: random.Random, n: int, fail: float, median_ms: float) -> VersionWindow:
    """A version's window as the outcome book builds it: ``n`` requests, each attempt failing
    with probability ``fail`` (retried up to twice), latencies log-normal around ``median_ms``."""
    attempts = failed = errors = 0
    for _ in range(n):
        for _try in range(3):
            attempts += 1
            if rng.random() >= fail:
                break
            failed += 1
        else:
            errors += 1
    latencies = [median_ms * math.exp(rng.gauss(0, 0.35)) for _ in range(n)]
    return window_of([SimpleNamespace(
        requests=n, errors=errors, attempts=attempts, failed_attempts=failed, blocked=0,
        latency=_hist(latencies), ttft=_hist(latencies), tpot={})])  # fmt: skip


def test_milliseconds_of_noise_never_fail_a_fast_build() -> None:
    """The case that rolled back an identical candidate: p95 4 ms against 2 ms is 2x, but
    under the absolute floor."""
    base = w(1000, latency=2.0, ttft_p95_ms=2.0, ttft_samples=1000)
    fast = w(1000, latency=4.0, ttft_p95_ms=4.0, ttft_samples=1000)
    judged = judge_step(fast, base, CFG, 50)
    assert judged.verdict == "pass", judged.reason


def test_an_identical_candidate_passes_and_a_failing_one_fails_every_time() -> None:
    """Twenty rollouts each, windows drawn as the outcome book records them: a candidate
    identical to production (1% failed attempts, same latency) is never failed; one failing
    10% of its attempts is failed every time; neither is ever judged on too few samples."""
    rng = random.Random(2026)
    verdicts = {"same": [], "bad": []}  # type: dict[str, list[str]]
    for _ in range(20):
        base = _window(rng, 2000, 0.01, 30.0)
        verdicts["same"].append(judge_step(_window(rng, 300, 0.01, 30.0), base, CFG, 50).verdict)
        verdicts["bad"].append(judge_step(_window(rng, 300, 0.10, 30.0), base, CFG, 50).verdict)
    assert "fail" not in verdicts["same"], verdicts["same"]
    assert verdicts["bad"] == ["fail"] * 20, verdicts["bad"]


def test_a_slow_tail_fails_only_when_significant() -> None:
    rng = random.Random(7)
    base = _window(rng, 2000, 0.0, 100.0)  # p95 about 180 ms
    limit = (base.latency_p95_ms or 0) * CFG.max_latency_ratio
    few_slow = VersionWindow(**{**base.__dict__, "requests": 100, "latency_p95_ms": limit + 50,
                                "hists": {"latency": {str(hist_bin(limit * 2)): 7,
                                                      str(hist_bin(100.0)): 93}}})  # fmt: skip
    assert judge_step(few_slow, base, CFG, 50).verdict == "inconclusive"  # 7% over, of 100
    many_slow = VersionWindow(**{**few_slow.__dict__, "hists": {"latency": {
        str(hist_bin(limit * 2)): 30, str(hist_bin(100.0)): 70}}})  # fmt: skip
    judged = judge_step(many_slow, base, CFG, 50)
    assert judged.verdict == "fail" and "latency p95" in judged.reason  # 30% over
