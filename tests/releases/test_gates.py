"""Gates: rules judged to pass / fail / inconclusive with reasons; missing data is never a
failure."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleetgate.releases.config import GateRule
from fleetgate.releases.gates import evaluate, judge

GOLDEN = GateRule(metric="golden", min_delta=-0.01)
REFUSAL = GateRule(metric="red-team", min=0.98)
TTFT = GateRule(metric="ttft_p95_ms", max_ratio=1.1)
QUANT = GateRule(metric="golden", pass_drop=0.02, fail_drop=0.05, baseline="parent")


@pytest.mark.parametrize(
    ("rule", "candidate", "baseline", "verdict"),
    [
        (GOLDEN, 0.905, 0.91, "pass"),
        (GOLDEN, 0.90, 0.91, "pass"),  # exactly one point below
        (GOLDEN, 0.89, 0.91, "fail"),
        (REFUSAL, 0.985, None, "pass"),
        (REFUSAL, 0.97, None, "fail"),
        (TTFT, 110.0, 100.0, "pass"),
        (TTFT, 112.0, 100.0, "fail"),
        (QUANT, 0.99, 1.0, "pass"),
        (QUANT, 0.97, 1.0, "inconclusive"),
        (QUANT, 0.92, 1.0, "fail"),
        (QUANT, 0.5, 0.0, "inconclusive"),  # no relative drop from zero
    ],
)
def test_rules(rule: GateRule, candidate: float, baseline: float | None, verdict: str) -> None:
    result = judge(rule, {rule.metric: candidate},
                   None if baseline is None else {rule.metric: baseline})  # fmt: skip
    assert result.verdict == verdict, result.reason
    assert rule.metric in result.reason


def test_missing_measurements_are_inconclusive() -> None:
    assert judge(REFUSAL, {}, None).verdict == "inconclusive"
    result = judge(GOLDEN, {"golden": 0.9}, None)
    assert result.verdict == "inconclusive" and "baseline" in result.reason


def test_the_gate_combines_rules() -> None:
    rules = (GOLDEN, REFUSAL, TTFT)
    base = {"production": {"golden": 0.9, "ttft_p95_ms": 100.0}}
    good = {"golden": 0.9, "red-team": 0.99, "ttft_p95_ms": 105.0}
    assert evaluate(rules, good, base).verdict == "pass"
    slow = {**good, "ttft_p95_ms": 150.0}
    result = evaluate(rules, slow, base)
    assert result.verdict == "fail" and "ttft_p95_ms" in result.reason
    unmeasured = {k: v for k, v in good.items() if k != "red-team"}
    assert evaluate(rules, unmeasured, base).verdict == "inconclusive"
    # fail wins over inconclusive
    assert evaluate(rules, {**unmeasured, "golden": 0.5}, base).verdict == "fail"
    # the quantization rule reads the parent's metrics, not production's
    assert evaluate((QUANT,), {"golden": 0.99}, base).verdict == "inconclusive"
    assert evaluate((QUANT,), {"golden": 0.99}, {"parent": {"golden": 1.0}}).verdict == "pass"
    assert evaluate((), {}, {}).verdict == "pass"


@pytest.mark.parametrize(
    "fields",
    [
        {"metric": "golden"},
        {"metric": "golden", "min": 0.9, "min_delta": 0},
        {"metric": "golden", "pass_drop": 0.02},
        {"metric": "golden", "pass_drop": 0.05, "fail_drop": 0.02},
        {"metric": "golden", "max_ratio": 0},
        {"metric": "golden", "min": 1, "baseline": "staging"},
    ],
)
def test_bad_rules_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        GateRule.model_validate(fields)
