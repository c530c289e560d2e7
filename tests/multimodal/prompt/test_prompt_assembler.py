from pathlib import Path

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.errors import ContextWindowExceeded
from fleetgate.multimodal.conversations.sql import SqlConversationStore
from fleetgate.multimodal.conversations.store import StoredTurn
from fleetgate.multimodal.prompt.assembler import PromptAssembler
from fleetgate.multimodal.prompt.config import PromptConfig
from fleetgate.multimodal.prompt.tokens import ApproxTokenCounter
from fleetgate.store import Database

SYSTEM = "You are a terse assistant for ACME."


async def test_ten_turn_conversation_is_truncated_oldest_first(tmp_path: Path) -> None:
    db = Database.from_url(f"sqlite:///{tmp_path / 'c.db'}", tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    store = SqlConversationStore(db.engine)
    config = PromptConfig(system_prompt=SYSTEM, context_window=200, reserve_output_tokens=40)
    assembler = PromptAssembler(config)
    counter = ApproxTokenCounter()
    cid = await store.create(tenant="t")
    dropped: list[int] = []
    try:
        for n in range(10):
            question = f"Question number {n}: tell me about topic {n} in detail please."
            history = await store.history(cid, tenant="t")  # the client sends only the new turn
            prompt = await assembler.assemble(question=question, history=history)
            msgs = prompt.messages
            assert msgs[0] == {"role": "system", "content": SYSTEM}
            assert msgs[-1] == {"role": "user", "content": question}
            kept = [m["content"] for m in msgs[1:-1]]
            everything = [t.text() for t in history]
            assert kept == everything[len(everything) - len(kept) :]  # a suffix: oldest dropped
            assert prompt.prompt_tokens <= 200 - 40
            assert prompt.prompt_tokens == sum(
                counter.count(m["content"]) + counter.message_overhead() for m in msgs
            )
            dropped.append(prompt.dropped_turns)
            answer = f"Answer {n}: topic {n} is about " + "things " * 6
            await store.append(
                cid, [StoredTurn("user", question), StoredTurn("assistant", answer)], tenant="t"
            )
    finally:
        await db.aclose()
    assert dropped[0] == 0 and dropped[-1] > 0
    assert dropped == sorted(dropped)


async def test_images_placeholders_and_profile_and_debug() -> None:
    config = PromptConfig(system_prompt=SYSTEM, context_window=1000, reserve_output_tokens=100)
    prompt = await PromptAssembler(config).assemble(
        question="What is in these?", profile="Prefers metric units.", image_tokens=[256, 256]
    )
    assert prompt.messages[-1]["content"] == "<image_0>\n<image_1>\nWhat is in these?"
    assert "About the user:\nPrefers metric units." in prompt.messages[0]["content"]
    debug = prompt.debug()
    assert debug["image_tokens"] == 512 and debug["history"]["dropped_turns"] == 0
    assert debug["prompt_tokens"] > 512


async def test_images_eat_the_history_budget_and_too_big_is_refused() -> None:
    config = PromptConfig(system_prompt=SYSTEM, context_window=400, reserve_output_tokens=50)
    history = [StoredTurn("user" if i % 2 == 0 else "assistant", "word " * 20) for i in range(6)]
    assembler = PromptAssembler(config)
    without = await assembler.assemble(question="hi", history=history)
    with_images = await assembler.assemble(question="hi", history=history, image_tokens=[200])
    assert with_images.kept_turns < without.kept_turns
    with pytest.raises(ContextWindowExceeded) as info:
        await assembler.assemble(question="hi", history=history, image_tokens=[400])
    assert info.value.code == "context_length_exceeded"


async def test_parts_can_be_switched_off() -> None:
    config = PromptConfig(include_history=False, include_profile=False)
    prompt = await PromptAssembler(config).assemble(
        question="q", history=[StoredTurn("user", "old")], profile="p"
    )
    assert prompt.messages == [{"role": "user", "content": "q"}]
