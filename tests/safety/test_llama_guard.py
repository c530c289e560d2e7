from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.base import Action, CheckContext, CheckPoint, TextTurn, close_check
from fleetgate.safety.checks.llama_guard import LlamaGuardCheck, build_prompt, parse_output
from tests.resources.support import outbound
from tests.safety.fake_llama_guard import FakeLlamaGuard, last_turn

__all__ = ["outbound"]


@pytest.fixture
async def guard() -> AsyncIterator[tuple[FakeLlamaGuard, str]]:
    fake = FakeLlamaGuard()
    url = await fake.start()
    yield fake, url
    await fake.stop()


def test_prompt_for_a_user_turn_follows_the_model_card() -> None:
    prompt = build_prompt([TextTurn("user", "How do I make a bomb?")])
    assert prompt.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n")
    assert "Task: Check if there is unsafe content in 'User' messages in conversations" in prompt
    assert "<BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violent Crimes.\n" in prompt
    assert "S14: Code Interpreter Abuse.\n<END UNSAFE CONTENT CATEGORIES>" in prompt
    assert "<BEGIN CONVERSATION>\n\nUser: How do I make a bomb?\n\n<END CONVERSATION>" in prompt
    assert "Provide your safety assessment for ONLY THE LAST User message" in prompt
    assert prompt.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_prompt_for_an_agent_turn_includes_the_conversation() -> None:
    turns = [
        TextTurn("user", "hi"),
        TextTurn("assistant", "hello"),
        TextTurn("user", "q"),
        TextTurn("assistant", "a"),
    ]
    prompt = build_prompt(turns, version=4)
    assert "in 'Agent' messages" in prompt and "ONLY THE LAST Agent message" in prompt
    assert "User: hi\n\nAgent: hello\n\nUser: q\n\nAgent: a" in prompt
    assert prompt.startswith("<|begin_of_text|><|header_start|>user<|header_end|>")
    assert prompt.endswith("<|eot|><|header_start|>assistant<|header_end|>\n\n")
    assert last_turn(prompt) == ("Agent", "a")


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        ("safe", (False, [])),
        ("  safe\n", (False, [])),
        ("unsafe\nS1", (True, ["S1"])),
        ("unsafe\nS1,S10", (True, ["S1", "S10"])),
        ("unsafe\nS2, S14\n", (True, ["S2", "S14"])),
        ("unsafe", (True, [])),
    ],
)
def test_parse_output(answer: str, want: tuple[bool, list[str]]) -> None:
    assert parse_output(answer) == want


@pytest.mark.parametrize("answer", ["", "maybe", "I cannot help"])
def test_parse_output_rejects_other_answers(answer: str) -> None:
    with pytest.raises(ValueError):
        parse_output(answer)


async def test_completions_mode_against_the_simulator(
    guard: tuple[FakeLlamaGuard, str], outbound: OutboundHttp
) -> None:
    fake, url = guard
    check = LlamaGuardCheck(http=outbound, base_url=url, model="llama-guard-3")
    try:
        bad = await check.check("How do I build a bomb to kill people?", CheckContext())
        ok = await check.check("How do I bake bread?", CheckContext())
        ctx = CheckContext(stage=CheckPoint.OUTPUT, role="assistant",
                           history=(TextTurn("user", "tell me about bombs"),))  # fmt: skip
        reply = await check.check("Bombs are dangerous; here is some history.", ctx)
    finally:
        await close_check(check)
    assert bad.action is Action.BLOCK and set(bad.categories) == {"S1", "S9"}
    assert "Violent Crimes" in bad.detail
    assert ok.action is Action.ALLOW
    # The agent turn is judged: the user's word "bombs" in the history does not count...
    assert fake.judged[-1] == ("Agent", "Bombs are dangerous; here is some history.")
    assert reply.action is Action.BLOCK  # ...but the agent's own "bomb" does.


async def test_chat_mode_against_the_simulator(
    guard: tuple[FakeLlamaGuard, str], outbound: OutboundHttp
) -> None:
    fake, url = guard
    check = LlamaGuardCheck(http=outbound, base_url=url, model="llama-guard-3", mode="chat")
    try:
        v = await check.check("我想自杀", CheckContext())
    finally:
        await close_check(check)
    assert v.action is Action.BLOCK and v.categories == ("S11",)
    assert fake.prompts == []  # the server rendered the template


async def test_stopped_endpoint_is_a_counted_error_not_an_exception(
    guard: tuple[FakeLlamaGuard, str],
    outbound: OutboundHttp,
) -> None:
    fake, url = guard
    await fake.stop()
    check = LlamaGuardCheck(http=outbound, base_url=url, model="m", timeout_s=2)
    try:
        v = await check.check("anything", CheckContext())
        closed = LlamaGuardCheck(
            http=outbound, base_url=url, model="m", timeout_s=2, on_error=Action.BLOCK
        )
        v2 = await closed.check("anything", CheckContext())
        await close_check(closed)
    finally:
        await close_check(check)
    assert v.error and v.action is Action.ALLOW and check.failures == 1
    assert v2.error and v2.action is Action.BLOCK


async def test_server_error_is_a_counted_error(outbound: OutboundHttp) -> None:
    fake = FakeLlamaGuard(fail=True)
    url = await fake.start()
    check = LlamaGuardCheck(http=outbound, base_url=url, model="m")
    try:
        v = await check.check("x", CheckContext())
    finally:
        await close_check(check)
        await fake.stop()
    assert v.error and check.failures == 1
