"""The cascade check: cheap stages first, a scored stage that escalates only what it is unsure
of, and a guard model (the Llama Guard simulator over HTTP) that decides those."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from fleetgate.errors import ConfigError
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety import CheckConfig, Guardrails, PolicyConfig, SafetyConfig
from fleetgate.safety.base import Action, CheckContext, CheckPoint, Verdict
from fleetgate.safety.checks.cascade import CascadeCheck
from fleetgate.safety.metrics import SafetyMetrics
from fleetgate.telemetry.registry import Registry
from tests.resources.support import outbound
from tests.safety.fake_llama_guard import FakeLlamaGuard
from tests.safety.risk_score import RiskScore, risk_registry

__all__ = ["outbound"]


def _config(guard_url: str, *, guard_on_error: str = "allow") -> SafetyConfig:
    stages = [
        {"type": "words"},
        {"type": "risk_score", "uncertain": [0.25, 0.75]},
        {"type": "llama_guard", "name": "guard",
         "options": {"base_url": guard_url, "model": "llama-guard-3", "timeout_s": 2}},
    ]  # fmt: skip
    return SafetyConfig(
        checks={
            "cascade": CheckConfig(
                type="cascade", options={"stages": stages}, on_error=guard_on_error
            )
        },  # fmt: skip
        policies={"default": PolicyConfig(input=["cascade"])},
    )


@pytest.fixture
async def guard() -> AsyncIterator[tuple[FakeLlamaGuard, str]]:
    fake = FakeLlamaGuard()
    url = await fake.start()
    yield fake, url
    await fake.stop()


async def test_only_uncertain_inputs_reach_the_guard_and_its_verdict_decides(
    guard: tuple[FakeLlamaGuard, str],
    outbound: OutboundHttp,
) -> None:
    fake, url = guard
    metrics_registry = Registry()
    guardrails = Guardrails(_config(url), registry=risk_registry(outbound),
                            metrics=SafetyMetrics(metrics_registry))  # fmt: skip
    policy = guardrails.policy("default")
    cases = {
        "How do I build a pipe bomb?": True,  # the word list is sure: blocked at stage 1
        "What a lovely morning for a walk": False,  # scored 0: allowed at stage 2
        "Steal the weapon plans and exploit them": True,  # scored 1: blocked at stage 2
        "Explain how ransomware spreads on a network": True,  # unsure -> guard: unsafe (S2)
        "Our red team will attack the staging cluster": False,  # unsure -> guard: safe
    }
    try:
        for text, want in cases.items():
            decision = await policy.run(CheckPoint.INPUT, text, CheckContext())
            assert decision.blocked is want, (text, decision)
        judged = [t for _, t in fake.judged]
        assert judged == [
            "Explain how ransomware spreads on a network",
            "Our red team will attack the staging cluster",
        ]
        cascade = guardrails.checks["cascade"]
        assert isinstance(cascade, CascadeCheck)
        assert cascade.decisions[("words", "block")] == 1
        assert cascade.decisions[("risk_score", "escalate")] == 2
        assert cascade.decisions[("guard", "block")] == 1
        assert cascade.decisions[("guard", "allow")] == 1
        text = metrics_registry.render().decode()
        assert ('fleetgate_safety_cascade_decisions_total{check="cascade",stage="guard",'
                'decision="block"} 1') in text  # fmt: skip
        assert 'fleetgate_safety_cascade_seconds_count{check="cascade",stage="guard"} 2' in text
        blocked = await policy.run(CheckPoint.INPUT, "Explain ransomware", CheckContext())
        assert blocked.reason is not None and blocked.reason.detail.startswith("guard:")
    finally:
        await guardrails.aclose()


@pytest.mark.parametrize(("on_error", "blocked"), [("allow", False), ("block", True)])
async def test_a_guard_that_is_down_falls_back_to_the_cascades_on_error(
    on_error: str,
    blocked: bool,
    outbound: OutboundHttp,
) -> None:
    fake = FakeLlamaGuard(fail=True)
    url = await fake.start()
    guardrails = Guardrails(_config(url, guard_on_error=on_error), registry=risk_registry(outbound))
    try:
        policy = guardrails.policy("default")
        unsure = await policy.run(CheckPoint.INPUT, "Explain ransomware please", CheckContext())
        assert unsure.blocked is blocked
        assert any(v.error for v in unsure.verdicts)
        sure = await policy.run(CheckPoint.INPUT, "Good morning", CheckContext())
        assert not sure.blocked and not any(v.error for v in sure.verdicts)  # guard not asked
    finally:
        await guardrails.aclose()
        await fake.stop()


async def test_a_stage_that_cannot_decide_escalates_to_the_next() -> None:
    class Down:
        name = "down"

        async def check(self, text: str, ctx: CheckContext) -> Verdict:
            return Verdict.failed(self.name, "timeout")

    scorer = RiskScore(name="risk")
    from fleetgate.safety.checks.cascade import CascadeStage

    cascade = CascadeCheck(
        name="c",
        stages=[CascadeStage("down", Down(), (0.2, 0.8)), CascadeStage("risk", scorer)],
        on_error=Action.BLOCK,
    )
    verdict = await cascade.check("steal it", CheckContext())
    assert verdict.action is Action.ALLOW and scorer.seen == ["steal it"]  # last stage decides
    assert cascade.decisions[("down", "error")] == 1


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([{"type": "words"}], "at least two stages"),
        ([{"type": "words"}, {"type": "risk_score", "uncertain": [0.8, 0.2]}], "low <= high"),
        ([{"type": "words"}, {"type": "risk_score", "uncertain": "high"}], "low, high"),
        ([{"type": "words"}, {"type": "cascade", "options": {}}], "cannot contain a cascade"),
        ([{"type": "words"}, {"type": "nope"}], "unknown type 'nope'"),
        ([{"type": "words"}, {"type": "words"}], "stage names repeat"),
        ([{"type": "words"}, {"type": "words", "name": "w2", "extra": 1}], "unknown keys"),
    ],
)  # fmt: skip
def test_a_bad_cascade_is_a_config_error(
    stages: list[dict[str, Any]], message: str, outbound: OutboundHttp
) -> None:
    with pytest.raises(ConfigError, match=message):
        risk_registry(outbound).create("c", CheckConfig(type="cascade", options={"stages": stages}))
