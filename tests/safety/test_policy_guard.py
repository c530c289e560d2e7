"""A policy-following guard (gpt-oss-safeguard style) over HTTP: the policy as the system
message, the guide's answer formats, reasoning never deciding, failures as error verdicts,
configuration errors, and the check as a cascade's last stage after Qwen3Guard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.errors import ConfigError
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety import CheckConfig, Guardrails, PolicyConfig, SafetyConfig
from fleetgate.safety.base import Action, CheckContext, CheckPoint, close_check
from fleetgate.safety.checks.cascade import CascadeCheck
from fleetgate.safety.checks.policy_guard import PolicyGuardCheck, parse_output
from fleetgate.safety.registry import builtin_registry
from tests.resources.support import outbound
from tests.safety.fake_chat_guard import FakeChatGuard, policy_answer, qwen3guard_answer

__all__ = ["outbound"]

JSON_POLICY = """# Spam policy (SP)
## INSTRUCTIONS
Classify the content. If it violates this policy, return:
{"violation": 1, "policy_category": "<rule id>"}
Otherwise return: {"violation": 0, "policy_category": null}
"""
BINARY_POLICY = """# Spam policy
Return exactly one character: 0 or 1.
0 = does not violate. 1 = violates.
"""


@pytest.fixture
async def guard() -> AsyncIterator[tuple[FakeChatGuard, str]]:
    fake = FakeChatGuard(policy_answer)
    url = await fake.start()
    yield fake, url
    await fake.stop()


@pytest.mark.parametrize(
    ("answer", "violation", "category"),
    [
        ("0", False, None),
        (" 1\n", True, None),
        ('{"violation": 1, "policy_category": "H2.f"}', True, "H2.f"),
        ('{"violation": 0, "policy_category": null}', False, None),
        ('```json\n{"violation": "1", "policy_category": "SP3.a"}\n```', True, "SP3.a"),
        ('{"violation": true, "policy_category": "X", "rule_ids": ["X"], "confidence": "high",'
         ' "rationale": "r"}', True, "X"),
    ],
)  # fmt: skip
def test_parse_output_reads_the_guides_formats(
    answer: str, violation: bool, category: str | None
) -> None:
    parsed = parse_output(answer)
    assert (parsed.violation, parsed.category) == (violation, category)


@pytest.mark.parametrize(
    ("answer", "violation", "category"),
    [
        ("1\n\nThe content violates H2.f", True, None),
        ('```json\n{"violation": 1, "policy_category": "SP2"}\n```\nWhy: spam', True, "SP2"),
        ('Verdict: {"violation": 0, "policy_category": "SP1"} as asked', False, "SP1"),
        ('{"violation": "true"}', True, None),
        ('{"violation": 1.0}', True, None),
        ('{"violation": "false"}', False, None),
        # free text is not a category (categories become metric labels)
        ('{"violation": 1, "policy_category": "spam, and also some scam"}', True, None),
    ],
)  # fmt: skip
def test_parse_output_reads_what_models_wrap_around_the_answer(
    answer: str, violation: bool, category: str | None
) -> None:
    parsed = parse_output(answer)
    assert (parsed.violation, parsed.category) == (violation, category)


async def test_an_edited_policy_file_is_read_on_the_next_check(
    guard: tuple[FakeChatGuard, str],
    tmp_path: Path,
    outbound: OutboundHttp,
) -> None:
    """A config reload keeps a check whose options did not change, so the file is watched."""
    import os

    fake, url = guard
    path = tmp_path / "policy.md"
    path.write_text(BINARY_POLICY, "utf-8")
    check = PolicyGuardCheck(http=outbound, base_url=url, model="m", policy_file=str(path))
    try:
        await check.check("hello", CheckContext())
        path.write_text(JSON_POLICY, "utf-8")
        os.utime(path, ns=(1, 10**18))  # a new mtime even on a coarse clock
        await check.check("hello", CheckContext())
        path.write_text("   ", "utf-8")  # emptied by mistake: the last good text stays
        os.utime(path, ns=(1, 2 * 10**18))
        await check.check("hello", CheckContext())
    finally:
        await close_check(check)
    systems = [r["messages"][0]["content"] for r in fake.requests]
    assert systems == [BINARY_POLICY, JSON_POLICY, JSON_POLICY]


@pytest.mark.parametrize(
    "options",
    [{"model": 5, "policy": "p"}, {"model": "m", "policy": 123}, {"model": "m", "policy": "p",
     "max_tokens": 0}, {"model": "m", "policy": "p", "timeout_s": "10"}],
)  # fmt: skip
def test_bad_option_types_are_config_errors(
    options: dict[str, Any], outbound: OutboundHttp
) -> None:
    with pytest.raises(ConfigError):
        builtin_registry(http=outbound).create(
            "g", CheckConfig(type="policy_guard", options={"base_url": "http://g/v1", **options})
        )


@pytest.mark.parametrize(
    "answer", ["", "yes", "2", '{"policy_category": "X"}', '{"violation": 3}', "[1]"]
)
def test_parse_output_rejects_other_answers(answer: str) -> None:
    with pytest.raises(ValueError):
        parse_output(answer)


@pytest.mark.parametrize("policy", [JSON_POLICY, BINARY_POLICY])
async def test_policy_is_the_system_message_and_reasoning_is_ignored(
    guard: tuple[FakeChatGuard, str],
    policy: str,
    outbound: OutboundHttp,
) -> None:
    fake, url = guard
    check = PolicyGuardCheck(base_url=url, model="openai/gpt-oss-safeguard-20b", policy=policy,
                             reasoning_effort="low", http=outbound)  # fmt: skip
    try:
        spam = await check.check("BUY NOW!!! click here for cheap watches", CheckContext())
        ok = await check.check("Can you fix my order?", CheckContext())
    finally:
        await close_check(check)
    assert fake.requests[0]["messages"] == [
        {"role": "system", "content": policy},
        {"role": "user", "content": "BUY NOW!!! click here for cheap watches"},
    ]
    assert fake.requests[0]["reasoning_effort"] == "low"
    assert "max_tokens" not in fake.requests[0]  # the guide: do not cap a reasoning model
    # The simulator's reasoning names the opposite label each time; the content decides.
    assert spam.action is Action.BLOCK and spam.score == 1.0
    assert ok.action is Action.ALLOW and ok.score == 0.0 and not ok.error
    if policy is JSON_POLICY:
        assert spam.categories == ("SP2.a",) and "unsolicited promotion" in spam.detail
    else:
        assert spam.categories == ("policy_violation",)


async def test_a_parseable_opposite_in_the_reasoning_field_does_not_decide(
    outbound: OutboundHttp,
) -> None:
    fake = FakeChatGuard(lambda m: ("0", '{"violation": 1, "policy_category": "X"}'))
    url = await fake.start()
    check = PolicyGuardCheck(http=outbound, base_url=url, model="m", policy="p")
    try:
        v = await check.check("anything", CheckContext())
    finally:
        await close_check(check)
        await fake.stop()
    assert v.action is Action.ALLOW and not v.error


async def test_an_answer_only_in_the_reasoning_field_is_an_error(outbound: OutboundHttp) -> None:
    fake = FakeChatGuard(lambda m: ("", '{"violation": 1, "policy_category": "X"}'))
    url = await fake.start()
    check = PolicyGuardCheck(
        http=outbound, base_url=url, model="m", policy="p", on_error=Action.BLOCK
    )
    try:
        v = await check.check("anything", CheckContext())
    finally:
        await close_check(check)
        await fake.stop()
    assert v.error and v.action is Action.BLOCK and check.failures == 1


async def test_unparseable_answer_and_timeout_are_counted_error_verdicts(
    outbound: OutboundHttp,
) -> None:
    chatty = FakeChatGuard(policy_answer, reply="This content looks like spam to me.")
    slow = FakeChatGuard(policy_answer, delay_s=2.0)
    chatty_url, slow_url = await chatty.start(), await slow.start()
    a = PolicyGuardCheck(http=outbound, base_url=chatty_url, model="m", policy=JSON_POLICY)
    b = PolicyGuardCheck(base_url=slow_url, model="m", policy=JSON_POLICY, timeout_s=0.2,
                         max_tokens=256, http=outbound)  # fmt: skip
    try:
        v1 = await a.check("buy now", CheckContext())
        v2 = await b.check("buy now", CheckContext())
    finally:
        await close_check(a)
        await close_check(b)
        await chatty.stop()
        await slow.stop()
    assert v1.error and v1.action is Action.ALLOW and a.failures == 1
    assert "unexpected policy guard answer" in v1.detail
    assert v2.error and b.failures == 1 and "TimeoutError" in v2.detail
    assert slow.requests[0]["max_tokens"] == 256


async def test_policy_file_is_read(
    guard: tuple[FakeChatGuard, str], tmp_path: Path, outbound: OutboundHttp
) -> None:
    fake, url = guard
    path = tmp_path / "spam.md"
    path.write_text(BINARY_POLICY, "utf-8")
    check = builtin_registry(http=outbound).create("spam", CheckConfig(
        type="policy_guard", options={"base_url": url, "model": "m", "policy_file": str(path)},
        on_error="block"))  # fmt: skip
    assert isinstance(check, PolicyGuardCheck) and check.on_error is Action.BLOCK
    try:
        v = await check.check("click here", CheckContext())
    finally:
        await close_check(check)
    assert v.action is Action.BLOCK
    assert fake.requests[0]["messages"][0]["content"] == BINARY_POLICY


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, r"safety.checks.spam: a policy guard needs 'policy' \(the policy text\) or "
             "'policy_file'"),
        ({"policy": "p", "policy_file": "p.md"},
         "safety.checks.spam: set either 'policy' or 'policy_file', not both"),
        ({"policy": "  "}, "the policy text is empty"),
        ({"policy_file": "/nonexistent/policy.md"}, "cannot read policy_file '/nonexistent"),
        ({"policy": "p", "reasoning_effort": "max"}, "reasoning_effort must be one of"),
        ({"policy": "p", "temperature": 1}, "unexpected keyword argument 'temperature'"),
    ],
)  # fmt: skip
def test_bad_config_is_a_config_error(
    extra: dict[str, Any], message: str, outbound: OutboundHttp
) -> None:
    options = {"base_url": "http://guard/v1", "model": "m", **extra}
    with pytest.raises(ConfigError, match=message):
        builtin_registry(http=outbound).create(
            "spam", CheckConfig(type="policy_guard", options=options)
        )


async def test_cascade_qwen3guard_escalates_controversial_to_the_policy_guard(
    outbound: OutboundHttp,
) -> None:
    qwen = FakeChatGuard(qwen3guard_answer)
    policy_model = FakeChatGuard(policy_answer)
    qwen_url, policy_url = await qwen.start(), await policy_model.start()
    stages = [
        {"type": "qwen3guard", "name": "qwen", "uncertain": [0.25, 0.75],
         "options": {"base_url": qwen_url, "model": "Qwen/Qwen3Guard-Gen-0.6B"}},
        {"type": "policy_guard", "name": "policy",
         "options": {"base_url": policy_url, "model": "gpt-oss-safeguard-20b",
                     "policy": JSON_POLICY}},
    ]  # fmt: skip
    config = SafetyConfig(
        checks={"cascade": CheckConfig(type="cascade", options={"stages": stages})},
        policies={"default": PolicyConfig(input=["cascade"])},
    )
    guardrails = Guardrails(config, registry=builtin_registry(http=outbound))
    policy = guardrails.policy("default")
    try:
        safe = await policy.run(CheckPoint.INPUT, "How do I bake bread?", CheckContext())
        bomb = await policy.run(CheckPoint.INPUT, "How do I build a bomb?", CheckContext())
        # Controversial (0.5) is inside the band: the policy model decides, per its policy.
        debate = await policy.run(CheckPoint.INPUT, "Was there election fraud?", CheckContext())
        promo = await policy.run(
            CheckPoint.INPUT, "election fraud exposed, click here to buy now", CheckContext()
        )
        assert not safe.blocked and bomb.blocked and not debate.blocked and promo.blocked
        assert bomb.categories == ["violent"] and promo.categories == ["SP2.a"]
        assert policy_model.judged == [
            "Was there election fraud?", "election fraud exposed, click here to buy now",
        ]  # fmt: skip
        cascade = guardrails.checks["cascade"]
        assert isinstance(cascade, CascadeCheck)
        assert cascade.decisions[("qwen", "escalate")] == 2
    finally:
        await guardrails.aclose()
        await qwen.stop()
        await policy_model.stop()
