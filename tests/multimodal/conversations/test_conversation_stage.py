"""Conversations through the gateway: only the new turn and ``x-conversation-id`` are sent."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream, Reply

SYSTEM = "You are the ACME assistant."


def _config(up: FakeUpstream) -> dict[str, Any]:
    cfg = one_alias(up)
    cfg["tenancy"] = {"enabled": False}
    cfg["multimodal"] = {
        "conversations": {"enabled": True},
        "prompts": {
            "tiny": {"system_prompt": SYSTEM, "context_window": 300, "reserve_output_tokens": 50}
        },
    }
    return cfg


def _question(i: int) -> str:
    return f"Question number {i}: what should I pack for a trip to city {i} next month?"


async def _send(client: Any, i: int, conv: str, **headers: str) -> Any:
    body = {"model": "tiny", "messages": [{"role": "user", "content": _question(i)}]}
    resp = await client.post(
        "/v1/chat/completions", json=body, headers={**AUTH, "x-conversation-id": conv, **headers}
    )
    assert resp.status == 200, await resp.text()
    return resp


async def _settle() -> None:
    await asyncio.sleep(0.05)  # turns are stored off the request path


async def test_ten_turns_keep_system_prompt_and_drop_oldest_history(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    for i in range(10):
        upstream.queue(Reply(content=f"Answer number {i}: bring a warm coat and good shoes."))
        await _send(client, i, "trip")
        await _settle()
    prompts = [s.body["messages"] for s in upstream.seen]
    transcript: list[dict[str, str]] = []
    for i, messages in enumerate(prompts):
        assert messages[0] == {"role": "system", "content": SYSTEM}
        assert messages[-1] == {"role": "user", "content": _question(i)}
        history = messages[1:-1]
        # The history is the newest stretch of the conversation, in order: oldest turns dropped.
        assert history == transcript[len(transcript) - len(history) :]
        transcript += [
            {"role": "user", "content": _question(i)},
            {
                "role": "assistant",
                "content": f"Answer number {i}: bring a warm coat and good shoes.",
            },
        ]
    kept = [len(m) - 2 for m in prompts]
    assert kept[:3] == [0, 2, 4]  # early turns fit whole
    assert kept[-1] < 18  # by turn ten the window (300 tokens) no longer holds all 18
    assert kept[-1] >= 2  # ...but keeps the newest turns that fit


async def test_conversations_are_separate_per_id_and_debug_shows_the_prompt(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    await _send(client, 1, "a")
    await _settle()
    await _send(client, 2, "b")
    await _settle()
    resp = await _send(client, 3, "a", **{"x-fleetgate-debug": "prompt"})
    sent = upstream.seen[-1].body["messages"]
    assert [m["content"] for m in sent[1:]] == [_question(1), "Hello there.", _question(3)]
    shown = orjson.loads(base64.b64decode(resp.headers["x-fleetgate-prompt"]))
    assert shown["messages"] == sent
    assert shown["history"] == {"kept_turns": 2, "dropped_turns": 0}
    assert (await resp.json())["fleetgate_debug"]["messages"] == sent


async def test_streamed_replies_are_stored_too(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    upstream.queue(Reply(content="Streamed answer here."))
    body = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    headers = {**AUTH, "x-conversation-id": "s"}
    resp = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert resp.status == 200
    await resp.read()
    await _settle()
    await _send(client, 7, "s")
    sent = upstream.seen[-1].body["messages"]
    assert sent[1:3] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Streamed answer here."},
    ]
