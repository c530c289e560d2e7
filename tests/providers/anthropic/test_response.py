"""Anthropic message -> OpenAI chat.completion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from fleetgate.providers.anthropic.response import anthropic_to_openai_response

USAGE = {
    "input_tokens": 100,
    "cache_creation_input_tokens": 20,
    "cache_read_input_tokens": 300,
    "output_tokens": 42,
}


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01abc",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": USAGE,
    }


def test_text_blocks_join_into_content_and_usage_counts_cache() -> None:
    msg = message([{"type": "text", "text": "Hello"}, {"type": "text", "text": ", world"}])
    out = anthropic_to_openai_response(msg, "my-alias", created=1700000000)
    ChatCompletion.model_validate(out)  # the OpenAI SDK accepts the shape
    assert out["id"] == "chatcmpl-msg_01abc"
    assert out["model"] == "my-alias"
    assert out["created"] == 1700000000
    choice = out["choices"][0]
    assert choice["message"]["content"] == "Hello, world"
    assert choice["finish_reason"] == "stop"
    assert out["usage"] == {
        "prompt_tokens": 420,
        "completion_tokens": 42,
        "total_tokens": 462,
        "prompt_tokens_details": {"cached_tokens": 300},
        "cache_creation_input_tokens": 20,  # priced as cache writes by spend
    }


def test_tool_use_becomes_tool_calls_with_json_string_arguments() -> None:
    msg = message(
        [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
        stop_reason="tool_use",
    )
    out = anthropic_to_openai_response(msg, "m")
    completion = ChatCompletion.model_validate(out)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["id"] == "toolu_1" and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert completion.choices[0].message.tool_calls is not None


def test_pure_tool_call_has_null_content() -> None:
    msg = message([{"type": "tool_use", "id": "t", "name": "now", "input": {}}], "tool_use")
    out = anthropic_to_openai_response(msg, "m")
    assert out["choices"][0]["message"]["content"] is None
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_thinking_becomes_reasoning_content() -> None:
    msg = message(
        [
            {"type": "thinking", "thinking": "27*453 = 12231", "signature": "sig"},
            {"type": "text", "text": "12,231"},
        ]
    )
    out = anthropic_to_openai_response(msg, "m")
    assert out["choices"][0]["message"]["reasoning_content"] == "27*453 = 12231"
    assert out["choices"][0]["message"]["content"] == "12,231"


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("model_context_window_exceeded", "length"),
        ("pause_turn", "stop"),
    ],
)
def test_stop_reasons(stop_reason: str, finish: str) -> None:
    out = anthropic_to_openai_response(message([{"type": "text", "text": "x"}], stop_reason), "m")
    assert out["choices"][0]["finish_reason"] == finish
