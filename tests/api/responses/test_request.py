"""Responses requests -> chat requests: what is translated, and what is refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import ResponseItem
from pydantic import TypeAdapter

from fleetgate.api.responses.request import chat_body, parse_request
from fleetgate.errors import InvalidRequest


def test_items_become_chat_messages_in_order() -> None:
    req = parse_request(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Use metric units."},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "Weather here? "},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA",
                     "detail": "low"},
                ]},
                {"type": "message", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
                {"type": "function_call", "call_id": "c1", "name": "weather",
                 "arguments": '{"city":"Oslo"}'},
                {"type": "function_call", "call_id": "c2", "name": "time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "4 C"},
                {"type": "function_call_output", "call_id": "c2",
                 "output": [{"type": "input_text", "text": "12:00"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
            ],
        }
    )  # fmt: skip
    body = chat_body(req)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use metric units."},
        {"role": "user", "content": [
            {"type": "text", "text": "Weather here? "},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                                "detail": "low"}},
        ]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
            {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "4 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
    ]  # fmt: skip
    assert "stream" not in body


def test_fields_tools_and_formats() -> None:
    req = parse_request(
        {
            "model": "m", "input": "hi", "stream": True, "max_output_tokens": 50,
            "temperature": 0.2, "top_p": 0.9, "user": "u1", "parallel_tool_calls": False,
            "tools": [{"type": "function", "name": "weather", "description": "d",
                       "parameters": {"type": "object"}, "strict": True}],
            "tool_choice": {"type": "function", "name": "weather"},
            "text": {"format": {"type": "json_schema", "name": "out",
                                "schema": {"type": "object"}, "strict": True}},
            "metadata": {"k": "v"}, "include": ["usage"], "store": False,
        }
    )  # fmt: skip
    body = chat_body(req)
    assert body["max_tokens"] == 50 and body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": {"type": "object"},
                "description": "d",
                "strict": True,
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "out", "schema": {"type": "object"}, "strict": True}}  # fmt: skip
    assert body["parallel_tool_calls"] is False and body["user"] == "u1"
    assert req.store is False and req.stream is True


def test_history_comes_first_and_repeated_calls_are_not_sent_twice() -> None:
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
    ]  # fmt: skip
    req = parse_request(
        {
            "model": "m", "previous_response_id": "resp_1", "instructions": "New rules.",
            "input": [
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
        }
    )  # fmt: skip
    assert chat_body(req, history)["messages"] == [
        {"role": "system", "content": "New rules."},
        *history,
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"input": "hi"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": "hi", "temprature": 1}, "temprature"),
        ({"model": "m", "input": "hi", "stream": "yes"}, "stream"),
        ({"model": "m", "input": "hi", "store": 1}, "store"),
        ({"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "hi", "temperature": 3}, "temperature"),
        ({"model": "m", "input": "hi", "background": True}, "background"),
        ({"model": "m", "input": "hi", "previous_response_id": 7}, "previous_response_id"),
        ({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"model": "m", "input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": "m", "input": "hi", "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "m", "input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"model": "m", "input": "hi", "metadata": {"k": 1}}, "metadata.k"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"model": "m", "input": ["hi"]}, "input[0]"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image",
          "file_id": "file-1", "detail": "auto"}]}]}, "input[0].content[0].image_url"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
         "input[0].content[0].type"),
        ({"model": "m", "input": [{"role": "system", "content": [{"type": "input_image",
          "image_url": "http://x/y.png", "detail": "auto"}]}]}, "input[0].content"),
        ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
         "input[0].call_id"),
        ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f",
          "arguments": {}}]}, "input[0].arguments"),
        ({"model": "m", "input": [{"type": "function_call_output", "call_id": "c",
          "output": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].output[0]"),
        ({"model": "m", "input": []}, "input"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(body: Any, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_body(parse_request(body))
    assert caught.value.status == 400
    assert caught.value.to_dict()["error"]["param"] == param


def test_input_items_are_valid_sdk_items_with_ids() -> None:
    req = parse_request(
        {
            "model": "m",
            "input": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [{"type": "input_image", "detail": "auto",
                                              "image_url": "https://x/y.png"}]},
                {"role": "assistant", "content": "ok", "id": "msg_given"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "done"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
            ],
        }
    )  # fmt: skip
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseItem)
    items = [adapter.validate_python(i) for i in req.items]
    assert [i.type for i in items] == [
        "message", "message", "message", "function_call", "function_call_output"
    ]  # fmt: skip
    assert items[2].id == "msg_given" and all(i.id for i in items)
    assert parse_request({"model": "m", "input": "hi"}).items[0]["content"] == [
        {"type": "input_text", "text": "hi"}
    ]
