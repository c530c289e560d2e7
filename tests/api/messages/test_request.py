"""Anthropic request -> OpenAI request (/v1/messages)."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.api.messages.request import anthropic_request_to_openai
from fleetgate.errors import InvalidRequest
from fleetgate.providers.anthropic.request import openai_chat_to_anthropic

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
