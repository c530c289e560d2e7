"""OpenAI chat request -> Anthropic Messages request."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.providers.anthropic.request import DEFAULT_MAX_TOKENS, openai_chat_to_anthropic

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def translate(**body: Any) -> dict[str, Any]:
    body.setdefault("model", "alias")
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return openai_chat_to_anthropic(body, "claude-upstream")


def test_minimal_request_uses_upstream_model_and_default_max_tokens() -> None:
    out = translate()
    assert out == {
        "model": "claude-upstream",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_system_and_developer_messages_become_top_level_system() -> None:
    out = translate(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
            {"role": "user", "content": "hi"},
        ]
    )
    assert out["system"] == "Be brief.\n\nAnswer in French."
    assert [m["role"] for m in out["messages"]] == ["user"]


def test_consecutive_same_role_messages_are_merged() -> None:
    out = translate(
        messages=[
            {"role": "user", "content": "one"},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
            {"role": "assistant", "content": "three"},
            {"role": "assistant", "content": "four"},
            {"role": "user", "content": "five"},
        ]
    )
    assert [(m["role"], [b["text"] for b in m["content"]]) for m in out["messages"]] == [
        ("user", ["one", "two"]),
        ("assistant", ["three", "four"]),
        ("user", ["five"]),
    ]


def test_images_data_url_and_https_url() -> None:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
    ]
    out = translate(messages=[{"role": "user", "content": parts}])
    blocks = out["messages"][0]["content"]
    assert blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert blocks[2] == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.com/cat.jpg"},
    }


@pytest.mark.parametrize(
    "url",
    ["data:image/tiff;base64,AAAA", "ftp://example.com/x.png", "data:image/png,notbase64"],
)
def test_bad_image_urls_are_refused_naming_the_part(url: str) -> None:
    parts = [{"type": "image_url", "image_url": {"url": url}}]
    with pytest.raises(InvalidRequest) as caught:
        translate(messages=[{"role": "user", "content": parts}])
    assert caught.value.param == "messages[0].content[0].image_url.url"


def test_pdf_file_part_becomes_a_document_block() -> None:
    parts = [{"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}}]
    out = translate(messages=[{"role": "user", "content": parts}])
    assert out["messages"][0]["content"][0] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
    }


def test_tool_round_trip_messages() -> None:
    out = translate(
        messages=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": [{"type": "text", "text": "24C"}],
            },
            {"role": "user", "content": "Which is warmer?"},
        ],
        tools=[WEATHER],
    )
    assistant, results = out["messages"][1], out["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "24C"},
            {"type": "text", "text": "Which is warmer?"},
        ],
    }
    assert len(out["messages"]) == 3


def test_tools_and_tool_choice_mapping() -> None:
    out = translate(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
    assert out["tools"] == [
        {
            "name": "get_weather",
            "input_schema": WEATHER["function"]["parameters"],  # type: ignore[index]
            "description": "Weather for a city",
        }
    ]
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather"},
        ),
        (None, None),
    ],
)
def test_tool_choice_values(choice: Any, expected: Any) -> None:
    out = translate(tools=[WEATHER], tool_choice=choice)
    assert out.get("tool_choice") == expected


def test_tool_without_parameters_gets_an_empty_object_schema() -> None:
    tool = {"type": "function", "function": {"name": "now"}}
    out = translate(tools=[tool])
    assert out["tools"] == [{"name": "now", "input_schema": {"type": "object", "properties": {}}}]


def test_sampling_fields() -> None:
    out = translate(
        max_completion_tokens=50,
        max_tokens=999,
        temperature=1.5,
        top_p=0.9,
        stop="END",
        stream=True,
        user="alice",
        seed=7,
        presence_penalty=0.5,
    )
    assert out["max_tokens"] == 50  # max_completion_tokens wins over the deprecated max_tokens
    assert out["temperature"] == 1.0  # OpenAI 0..2 clamped into Anthropic's 0..1
    assert out["top_p"] == 0.9
    assert out["stop_sequences"] == ["END"]
    assert out["stream"] is True
    assert out["metadata"] == {"user_id": "alice"}
    assert "seed" not in out and "presence_penalty" not in out


def test_json_schema_response_format_becomes_structured_output() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    out = translate(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    )
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 2}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": "10"}, "max_completion_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"stop": 5}, "stop"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format.type"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "only system"}]}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ],
)
def test_bad_shapes_raise_invalid_request_naming_the_field(
    body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        translate(**body)
    assert caught.value.param == param
    assert caught.value.status == 400


def test_tool_call_arguments_must_be_a_json_object() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1, 2"}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}]
    with pytest.raises(InvalidRequest) as caught:
        translate(messages=messages)
    assert caught.value.param == "messages[1].tool_calls[0].function.arguments"


def test_empty_tool_call_arguments_mean_no_arguments() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "now", "arguments": ""}}
    messages = [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "noon"},
    ]
    out = translate(messages=messages)
    assert out["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c", "name": "now", "input": {}}
    ]


def test_input_body_is_not_modified() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}],
    }
    snapshot = repr(body)
    openai_chat_to_anthropic(body, "claude")
    assert repr(body) == snapshot


def test_tool_results_come_first_in_a_merged_user_turn() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    out = translate(
        messages=[
            {"role": "user", "content": "time?"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "user", "content": "(hurry)"},
            {"role": "tool", "tool_call_id": "c1", "content": "noon"},
        ]
    )
    assert [b["type"] for b in out["messages"][2]["content"]] == ["tool_result", "text"]


def test_cache_control_breakpoints_are_passed_to_anthropic() -> None:
    """LiteLLM's convention: ``cache_control`` on a part, a message, a tool or the request."""
    eph = {"type": "ephemeral"}
    body = {
        "model": "m",
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "Long rules.", "cache_control": eph},
                {"type": "text", "text": "Today is Monday."},
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "Big document", "cache_control": eph},
                {"type": "text", "text": "Question?"},
            ]},
            {"role": "assistant", "content": "Answer.", "cache_control": eph},
            {"role": "user", "content": "More?"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}},
                   "cache_control": eph}],
    }  # fmt: skip
    out = openai_chat_to_anthropic(body, "claude-x")
    assert out["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert out["system"] == [
        {"type": "text", "text": "Long rules.", "cache_control": eph},
        {"type": "text", "text": "Today is Monday."},
    ]
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "Big document", "cache_control": eph},
        {"type": "text", "text": "Question?"},
    ]
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "Answer.", "cache_control": eph}
    ]
    assert out["tools"][0]["cache_control"] == eph
    plain = openai_chat_to_anthropic(
        {"model": "m", "messages": [{"role": "system", "content": "a"},
                                    {"role": "system", "content": "b"},
                                    {"role": "user", "content": "hi"}]}, "c",
    )  # fmt: skip
    assert plain["system"] == "a\n\nb" and "cache_control" not in plain


@pytest.mark.parametrize(
    ("marker", "param"),
    [
        ({"type": "persistent"}, "messages[0].content[0].cache_control"),
        ({"type": "ephemeral", "ttl": "2d"}, "messages[0].content[0].cache_control"),
        ("yes", "messages[0].content[0].cache_control"),
    ],
)
def test_a_bad_cache_control_is_refused_by_name(marker: Any, param: str) -> None:
    part = {"type": "text", "text": "x", "cache_control": marker}
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    with pytest.raises(InvalidRequest) as caught:
        openai_chat_to_anthropic(body, "c")
    assert caught.value.to_dict()["error"]["param"] == param
