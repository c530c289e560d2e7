"""Gates: a version's evaluation metrics judged by rules, to pass, fail or inconclusive.

A rule reads one metric of the candidate (``golden``: the mean score of the golden items,
0..1; ``red-team``: the refusal rate on red-team items; ``ttft_p95_ms``; ``error_rate``; see
docs/releases.md) and, for relative rules, the same metric of a baseline version measured on
the same suite. A missing measurement is *inconclusive*, never a failure: it needs an
evaluation run (or a person), not a rollback. The gate's verdict is ``fail`` if any rule
fails, else ``inconclusive`` if any rule is, else ``pass``.

Example::

    rules = (GateRule(metric="golden", pass_drop=0.02, fail_drop=0.05),)
    evaluate(rules, {"golden": 0.97}, {"production": {"golden": 1.0}}).verdict  # inconclusive
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from fleetgate.releases.config import GateRule

__all__ = ["GateResult", "RuleResult", "Verdict", "evaluate", "judge"]

Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class RuleResult:
    rule: str
    metric: str
    verdict: Verdict
    reason: str
    candidate: float | None = None
    baseline: float | None = None


@dataclass(frozen=True)
class GateResult:
    verdict: Verdict
    rules: list[RuleResult] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason,
                "rules": [asdict(r) for r in self.rules]}  # fmt: skip


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _absolute(rule: GateRule, c: float) -> tuple[Verdict, str]:
    if rule.min is not None and c < rule.min:
        return "fail", f"{rule.metric} {_fmt(c)} < min {_fmt(rule.min)}"
    if rule.max is not None and c > rule.max:
        return "fail", f"{rule.metric} {_fmt(c)} > max {_fmt(rule.max)}"
    return "pass", f"{rule.metric} {_fmt(c)} within bounds"


def _relative(rule: GateRule, c: float, b: float) -> tuple[Verdict, str]:
    if rule.min_delta is not None:
        delta = c - b
        ok = delta >= rule.min_delta - 1e-12
        sign = ">=" if ok else "<"
        return ("pass" if ok else "fail"), (
            f"{rule.metric} {_fmt(c)} - baseline {_fmt(b)} = {_fmt(delta)} "
            f"{sign} {_fmt(rule.min_delta)}"
        )
    if rule.max_ratio is not None:
        if b <= 0:
            return "inconclusive", f"baseline {rule.metric} is {_fmt(b)}: no ratio"
        ratio = c / b
        ok = ratio <= rule.max_ratio + 1e-12
        return ("pass" if ok else "fail"), (
            f"{rule.metric} {_fmt(c)} is {ratio:.3f}x baseline {_fmt(b)} "
            f"({'<=' if ok else '>'} {rule.max_ratio:g}x)"
        )
    assert rule.pass_drop is not None and rule.fail_drop is not None
    if b <= 0:
        return "inconclusive", f"baseline {rule.metric} is {_fmt(b)}: no relative drop"
    drop = (b - c) / b
    text = f"{rule.metric} dropped {drop:.2%} from baseline {_fmt(b)} to {_fmt(c)}"
    if drop < rule.pass_drop:
        return "pass", f"{text} (< {rule.pass_drop:.0%})"
    if drop > rule.fail_drop:
        return "fail", f"{text} (> {rule.fail_drop:.0%})"
    return "inconclusive", (
        f"{text} (between {rule.pass_drop:.0%} and {rule.fail_drop:.0%}: needs a person)"
    )


def judge(
    rule: GateRule, candidate: Mapping[str, float], baseline: Mapping[str, float] | None
) -> RuleResult:
    """One rule against the candidate's and the baseline's metrics."""
    c = candidate.get(rule.metric)
    if c is None:
        return RuleResult(rule.label, rule.metric, "inconclusive",
                          f"no evaluation run of this version measured {rule.metric}")  # fmt: skip
    if rule.min is not None or rule.max is not None:
        verdict, reason = _absolute(rule, c)
        return RuleResult(rule.label, rule.metric, verdict, reason, c)
    b = None if baseline is None else baseline.get(rule.metric)
    if b is None:
        return RuleResult(rule.label, rule.metric, "inconclusive",
                          f"no {rule.baseline} baseline measured {rule.metric} on the same suite",
                          c)  # fmt: skip
    verdict, reason = _relative(rule, c, b)
    return RuleResult(rule.label, rule.metric, verdict, reason, c, b)


def evaluate(
    rules: Sequence[GateRule],
    candidate: Mapping[str, float],
    baselines: Mapping[str, Mapping[str, float]],
) -> GateResult:
    """Every rule; ``baselines``: the baseline versions' metrics by kind (``production``,
    ``parent``), an absent kind making its relative rules inconclusive."""
    if not rules:
        return GateResult("pass", [], "no gate rules for this model")
    results = [judge(r, candidate, baselines.get(r.baseline)) for r in rules]
    verdicts = {r.verdict for r in results}
    verdict: Verdict = (
        "fail" if "fail" in verdicts else "inconclusive" if "inconclusive" in verdicts else "pass"
    )
    reasons = "; ".join(f"{r.rule}: {r.reason}" for r in results if r.verdict == verdict)
    return GateResult(verdict, results, reasons)
