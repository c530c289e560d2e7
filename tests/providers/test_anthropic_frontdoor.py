"""Anthropic request -> OpenAI request, and OpenAI answers -> Anthropic answers (/v1/messages)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message

from fleetgate.errors import InvalidRequest, UpstreamBadResponse
from fleetgate.providers.anthropic_frontdoor import (
    anthropic_request_to_openai,
    openai_response_to_anthropic,
)
from fleetgate.providers.anthropic_frontdoor_stream import OpenAIToAnthropicStream
from fleetgate.providers.anthropic_request import openai_chat_to_anthropic

TOOL = {
    "name": "get_weather",
    "description": "Weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CONVERSATION: dict[str, Any] = {
    "model": "claude-alias",
    "max_tokens": 256,
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "use the tool", "signature": "s"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3C"},
                {"type": "text", "text": "Coat?"},
            ],
        },
    ],
    "tools": [TOOL],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    "stop_sequences": ["END"],
    "temperature": 0.2,
    "metadata": {"user_id": "u-1"},
    "stream": True,
}


def test_request_translation() -> None:
    out = anthropic_request_to_openai(CONVERSATION)
    assert out["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "-3C"},
        {"role": "user", "content": "Coat?"},
    ]
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": TOOL["input_schema"],
                "description": "Weather",
            },
        }
    ]
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert out["stop"] == ["END"] and out["temperature"] == 0.2 and out["user"] == "u-1"
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert out["max_tokens"] == 256 and out["model"] == "claude-alias"


def test_request_round_trip_through_both_translations_keeps_the_conversation() -> None:
    body = {key: value for key, value in CONVERSATION.items() if key != "stream"}
    back = openai_chat_to_anthropic(anthropic_request_to_openai(body), "claude-alias")
    assert back["system"] == "Be brief."
    assert back["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    roles = [m["role"] for m in back["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert back["messages"][1]["content"] == [
        CONVERSATION["messages"][1]["content"][1]
    ]  # thinking dropped
    assert back["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "-3C",
    }


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"model": ""}, "model"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ],
)
def test_bad_requests_name_the_field(change: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        anthropic_request_to_openai({**CONVERSATION, **change})
    assert caught.value.param == param


def completion(message: dict[str, Any], finish: str, **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1,
        "model": "upstream-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 8,
            "total_tokens": 58,
            "prompt_tokens_details": {"cached_tokens": 30},
        },
    }


def test_response_with_tool_call_validates_as_an_anthropic_message() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    resp = completion(
        {"role": "assistant", "content": "Checking.", "tool_calls": [call]}, "tool_calls"
    )
    out = openai_response_to_anthropic(resp, "claude-alias")
    msg = Message.model_validate(out)
    assert msg.stop_reason == "tool_use" and msg.model == "claude-alias"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert out["content"][1]["input"] == {"city": "Oslo"}
    assert out["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 30,
        "output_tokens": 8,
    }


@pytest.mark.parametrize(
    ("finish", "extra", "stop_reason", "stop_sequence"),
    [
        ("stop", {}, "end_turn", None),
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),
        ("length", {}, "max_tokens", None),
        ("content_filter", {}, "refusal", None),
    ],
)
def test_finish_reasons(
    finish: str, extra: dict[str, Any], stop_reason: str, stop_sequence: str | None
) -> None:
    out = openai_response_to_anthropic(
        completion({"role": "assistant", "content": "x"}, finish, **extra)
    )
    assert (out["stop_reason"], out["stop_sequence"]) == (stop_reason, stop_sequence)


def test_garbage_tool_arguments_from_upstream_are_a_bad_response() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
    with pytest.raises(UpstreamBadResponse):
        openai_response_to_anthropic(
            completion({"role": "assistant", "tool_calls": [call]}, "tool_calls")
        )
    with pytest.raises(UpstreamBadResponse):
        openai_response_to_anthropic({"choices": []})


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
