"""What the output and stream checks block is never spoken or stored: a response passes the
stages inside out, so the guardrails see it before speech synthesis and conversation memory."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory

CANNED = "This reply was stopped by the content policy."
HARMFUL = "Then you pack the pipe bomb with nails and hide it under the stage."
HARMFUL_WORDS = ("pipe", "bomb", "nails")
LONG = (
    "Here is a short summary of the plan for the weekend workshop with the whole team. "
    "First we meet at nine in the main hall and review the agenda together. "
)


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="echo"), port=0) as url:
        yield f"{url}/v1"


def _config(url: str, **multimodal: Any) -> dict[str, Any]:
    return {
        "models": [{"alias": "tiny", "deployments": [
            {"provider": "openai", "model": "tiny", "api_base": url}]}],
        "tenancy": {"enabled": False},
        "multimodal": multimodal,
        "safety": {
            "checks": {"words": {"type": "words"}},
            "policies": {"default": {
                "output": ["words"], "stream": ["words"], "canned_reply": CANNED,
                "stream_options": {"interval_tokens": 8, "hold_back": True},
            }},
            "audit": {"enabled": False},
        },
    }  # fmt: skip


def _audio_body(text: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "tiny", "stream": stream, "max_tokens": 400,
        "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "pcm16"},
        "messages": [{"role": "user", "content": text}],
    }  # fmt: skip


async def test_a_blocked_reply_is_not_spoken_in_a_json_response(
    gateway: GatewayFactory, echo: str
) -> None:
    client = await gateway(_config(echo))
    resp = await client.post("/v1/chat/completions", json=_audio_body(HARMFUL, False), headers=AUTH)
    assert resp.status == 200, await resp.text()
    message = (await resp.json())["choices"][0]["message"]
    transcript = message["audio"]["transcript"]
    assert not any(w in transcript for w in HARMFUL_WORDS), transcript
    assert CANNED in transcript


async def test_no_audio_of_a_blocked_stream_reaches_the_client(
    gateway: GatewayFactory, echo: str
) -> None:
    client = await gateway(_config(echo))
    body = _audio_body(LONG + HARMFUL, True)
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    spoken = []
    for line in (await resp.read()).split(b"\n\n"):
        if line.startswith(b"data: {"):
            event = orjson.loads(line[6:])
            for choice in event.get("choices") or ():
                audio = (choice.get("delta") or {}).get("audio")
                if audio:
                    assert len(base64.b64decode(audio["data"])) > 0
                    spoken.append(audio["transcript"])
    said = " ".join(spoken)
    assert not any(w in said for w in HARMFUL_WORDS), said


async def test_a_blocked_reply_is_not_stored_in_the_conversation(
    gateway: GatewayFactory, echo: str
) -> None:
    client = await gateway(_config(echo, conversations={"enabled": True}))
    headers = {**AUTH, "x-conversation-id": "seam"}
    for stream in (False, True):
        body = {"model": "tiny", "stream": stream, "max_tokens": 400,
                "messages": [{"role": "user", "content": HARMFUL}]}  # fmt: skip
        resp = await client.post("/v1/chat/completions", json=body, headers=headers)
        assert resp.status == 200
        await resp.read()
        await asyncio.sleep(0.1)  # turns are stored off the request path
    # The next turn carries the stored history upstream; the debug output shows what was sent.
    body = {"model": "tiny", "max_tokens": 400,
            "messages": [{"role": "user", "content": "What did you say before?"}]}  # fmt: skip
    debug = {**headers, "x-fleetgate-debug": "prompt"}
    resp = await client.post("/v1/chat/completions", json=body, headers=debug)
    sent = (await resp.json())["fleetgate_debug"]["messages"]
    replies = [m["content"] for m in sent if m["role"] == "assistant"]
    assert len(replies) == 2, sent
    for reply in replies:
        assert not any(w in reply for w in HARMFUL_WORDS), reply
