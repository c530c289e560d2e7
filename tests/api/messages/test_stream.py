"""OpenAI chunks -> Anthropic streaming events (/v1/messages)."""

from __future__ import annotations

import json
from typing import Any

from fleetgate.api.messages.stream import OpenAIToAnthropicStream


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-7",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "u",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_stream_event_sequence() -> None:
    stream = OpenAIToAnthropicStream("claude-alias")
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "think"}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        chunk({}, "tool_calls"),
        {"id": "chatcmpl-7", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
    ]
    events = [e for c in chunks for e in stream.feed(c)] + stream.finish()
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta",
        "message_stop",
    ]  # fmt: skip
    assert all(data["type"] == name for name, data in events)
    assert events[0][1]["message"]["id"] == "msg_chatcmpl-7"
    assert [events[i][1]["content_block"]["type"] for i in (1, 4, 8)] == [
        "thinking",
        "text",
        "tool_use",
    ]
    partial = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if d.get("delta", {}).get("type") == "input_json_delta"
    )
    assert json.loads(partial) == {"a": 1}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert (
        events[-2][1]["usage"]["input_tokens"] == 9 and events[-2][1]["usage"]["output_tokens"] == 4
    )
    assert stream.finish() == []


def test_empty_upstream_stream_still_gives_a_complete_anthropic_sequence() -> None:
    names = [name for name, _ in OpenAIToAnthropicStream("m").finish()]
    assert names == ["message_start", "message_delta", "message_stop"]
