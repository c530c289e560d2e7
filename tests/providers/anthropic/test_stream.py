"""Anthropic stream events -> OpenAI chat.completion.chunk objects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from fleetgate.errors import UpstreamStatusError
from fleetgate.providers.anthropic.stream import AnthropicStreamTranslator
from fleetgate.sse import SSEParser

# The shape of Anthropic's published "streaming request with tool use" example, with fewer
# text pieces: a text block, a ping, then a tool_use block whose input arrives in fragments.
PUBLISHED_TOOL_STREAM = b"""event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-opus-4-1-20250805","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let's check"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"San Francisco, CA\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""  # noqa: E501 - wire data kept as Anthropic sends it, one event per line


def translate(
    raw: bytes, include_usage: bool = True
) -> tuple[list[dict[str, Any]], AnthropicStreamTranslator]:
    translator = AnthropicStreamTranslator("my-alias", include_usage, created=1700000000)
    chunks: list[dict[str, Any]] = []
    for event, data in SSEParser().feed(raw):
        chunks += translator.feed(event, json.loads(data))
    return chunks, translator


def event(name: str, **data: Any) -> tuple[str, dict[str, Any]]:
    return name, {"type": name, **data}


def test_published_tool_stream_chunk_order() -> None:
    chunks, translator = translate(PUBLISHED_TOOL_STREAM)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1:3] == [{"content": "Okay"}, {"content": ", let's check"}]
    assert deltas[3] == {
        "tool_calls": [
            {
                "index": 0,
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    }
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[4:6]]  # type: ignore[index]
    assert json.loads("".join(fragments)) == {"location": "San Francisco, CA"}
    assert chunks[6]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert chunks[7]["choices"] == []
    assert chunks[7]["usage"] == {
        "prompt_tokens": 472,
        "completion_tokens": 89,
        "total_tokens": 561,
        "prompt_tokens_details": {"cached_tokens": 0},
        "cache_creation_input_tokens": 0,
    }
    assert len(chunks) == 8
    assert all(c["usage"] is None for c in chunks[:-1])  # as OpenAI does with include_usage
    assert len({c["id"] for c in chunks}) == 1
    assert translator.finished and translator.usage == chunks[7]["usage"]


def test_openai_sdk_accumulates_the_chunks_into_the_right_completion() -> None:
    chunks, _ = translate(PUBLISHED_TOOL_STREAM)
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    final = state.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Okay, let's check"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"location": "San Francisco, CA"}  # type: ignore[union-attr]
    assert final.choices[0].finish_reason == "tool_calls"


def test_without_include_usage_there_is_no_usage_chunk() -> None:
    chunks, translator = translate(PUBLISHED_TOOL_STREAM, include_usage=False)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all("usage" not in c for c in chunks)
    assert translator.usage is not None and translator.usage["completion_tokens"] == 89


def test_thinking_and_cache_usage() -> None:
    translator = AnthropicStreamTranslator("m", include_usage=True)
    usage = {
        "input_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 0,
        "output_tokens": 1,
    }
    events = [
        event("message_start", message={"id": "msg_1", "content": [], "usage": usage}),
        event("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
        event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "x"}),
        event("content_block_stop", index=0),
        event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=1, delta={"type": "text_delta", "text": "42"}),
        event("content_block_stop", index=1),
        event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 9}),
        event("message_stop"),
    ]
    chunks = [c for name, data in events for c in translator.feed(name, data)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[1:3] == [{"reasoning_content": "hmm"}, {"content": "42"}]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["prompt_tokens"] == 105
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 100}


def test_tool_call_without_fragments_gets_empty_object_arguments() -> None:
    translator = AnthropicStreamTranslator("m")
    events = [
        event(
            "message_start",
            message={"id": "msg_2", "usage": {"input_tokens": 3, "output_tokens": 1}},
        ),
        event(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "t", "name": "now", "input": {}},
        ),
        event(
            "content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": ""}
        ),
        event("content_block_stop", index=0),
    ]
    chunks = [c for name, data in events for c in translator.feed(name, data)]
    arguments = "".join(
        call["function"]["arguments"]
        for c in chunks
        for call in c["choices"][0]["delta"].get("tool_calls", [])
    )
    assert arguments == "{}"
    assert not translator.finished  # no message_stop yet: a cut-off stream is detectable


def test_two_tool_calls_get_consecutive_indexes() -> None:
    translator = AnthropicStreamTranslator("m")
    events = [event("message_start", message={"id": "msg_3"})]
    for block, name in ((0, "a"), (1, "b")):
        start = {"type": "tool_use", "id": f"id_{name}", "name": name, "input": {}}
        events += [
            event("content_block_start", index=block, content_block=start),
            event(
                "content_block_delta",
                index=block,
                delta={"type": "input_json_delta", "partial_json": "{}"},
            ),
            event("content_block_stop", index=block),
        ]
    chunks = [c for name, data in events for c in translator.feed(name, data)]
    heads = [
        call
        for c in chunks
        for call in c["choices"][0]["delta"].get("tool_calls", [])
        if "id" in call
    ]
    assert [(h["index"], h["function"]["name"]) for h in heads] == [(0, "a"), (1, "b")]


def test_error_event_raises_retryable_upstream_error() -> None:
    translator = AnthropicStreamTranslator("m")
    translator.feed("message_start", {"type": "message_start", "message": {"id": "msg_4"}})
    with pytest.raises(UpstreamStatusError) as caught:
        translator.feed(
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
    assert caught.value.upstream_status == 529 and caught.value.retryable


def test_unknown_events_and_ping_are_ignored() -> None:
    translator = AnthropicStreamTranslator("m")
    assert (
        len(translator.feed("message_start", {"type": "message_start", "message": {"id": "x"}}))
        == 1
    )
    assert translator.feed("ping", {"type": "ping"}) == []
    assert translator.feed("some_future_event", {"type": "some_future_event"}) == []
    assert translator.usage is not None and not translator.finished
