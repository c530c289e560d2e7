"""OpenAI chat completion -> Anthropic message (/v1/messages)."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message

from fleetgate.api.messages.response import openai_response_to_anthropic
from fleetgate.errors import UpstreamBadResponse


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
