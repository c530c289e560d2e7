"""The chat request (as the stages left it) -> the native upstream's Responses request."""

from __future__ import annotations

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.providers.responses.request import chat_to_responses


def test_messages_tools_and_limits_become_a_responses_request() -> None:
    body = {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is here?"},
                {"type": "image_url",
                 "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}},
            ]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "look", "arguments": '{"x":1}'}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            {"role": "assistant", "content": "A cat."},
            {"role": "system", "content": "Masked later."},
        ],
        "tools": [{"type": "function",
                   "function": {"name": "look", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "look"}},
        "max_tokens": 64, "temperature": 0.2, "user": "u1", "cache_salt": "team-a",
        "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {}}},
        "stream_options": {"include_usage": True}, "n": 1,
    }  # fmt: skip
    out = chat_to_responses(body, {"reasoning": {"effort": "high"}}, stream=True)
    assert out == {
        "model": "gpt-x", "store": False, "stream": True, "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is here?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"},
            ]},
            {"type": "function_call", "call_id": "call_1", "name": "look", "arguments": '{"x":1}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "a cat"},
            {"type": "message", "role": "assistant", "content": "A cat."},
            {"type": "message", "role": "system", "content": "Masked later."},
        ],
        "tools": [{"type": "function", "name": "look", "parameters": {"type": "object"},
                   "strict": False}],
        "tool_choice": {"type": "function", "name": "look"},
        "max_output_tokens": 64, "temperature": 0.2, "user": "u1", "cache_salt": "team-a",
        "text": {"format": {"type": "json_schema", "name": "o", "schema": {}}},
        "reasoning": {"effort": "high"},
    }  # fmt: skip


def test_the_clients_own_text_field_wins_and_chat_only_fields_are_left_out() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_object"}, "logit_bias": {"1": 2}}  # fmt: skip
    text = {"format": {"type": "json_object"}, "verbosity": "low"}
    out = chat_to_responses(body, {"text": text}, stream=False)
    assert out["text"] == text and "logit_bias" not in out and "instructions" not in out
    assert out["input"] == [{"type": "message", "role": "user", "content": "hi"}]


def test_a_part_the_responses_api_cannot_take_is_a_400() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}]}  # fmt: skip
    with pytest.raises(InvalidRequest):
        chat_to_responses(body, {}, stream=False)
