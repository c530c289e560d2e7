"""The Responses shapes, checked against the openai SDK's own pydantic types (strict
validation, not the SDK's lenient parsing): response objects and every streaming event."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from fleetgate.api.responses.output import ResponseMeta
from fleetgate.api.responses.request import parse_request
from fleetgate.api.responses.wire import ResponsesWire
from fleetgate.errors import UpstreamConnectError

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _wire(**body: Any) -> ResponsesWire:
    return ResponsesWire(ResponseMeta(parse_request({"model": "m", "input": "hi", **body})))


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def _events(raw: bytes) -> list[Any]:
    out = []
    for frame in raw.decode().split("\n\n"):
        if frame:
            name, data = frame.split("\n", 1)
            event = EVENTS.validate_python(json.loads(data.removeprefix("data: ")))
            assert name == f"event: {event.type}"
            out.append(event)
    return out


USAGE = {
    "prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39,
    "prompt_tokens_details": {"cached_tokens": 20}, "cache_creation_input_tokens": 4,
}  # fmt: skip


def test_a_chat_completion_is_a_valid_response_object() -> None:
    wire = _wire(tools=[{"type": "function", "name": "f", "parameters": {}, "strict": False}],
                 metadata={"k": "v"}, max_output_tokens=9)  # fmt: skip
    chat = {
        "id": "x", "object": "chat.completion", "created": 1, "model": "up",
        "choices": [{"index": 0, "finish_reason": "length", "message": {
            "role": "assistant", "content": "partial",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}]}}],
        "usage": USAGE,
    }  # fmt: skip
    out = Response.model_validate(json.loads(wire.json(chat)))
    assert out.status == "incomplete"
    assert out.incomplete_details is not None
    assert out.incomplete_details.reason == "max_output_tokens"
    assert [i.type for i in out.output] == ["message", "function_call"]
    assert out.output_text == "partial" and out.model == "m" and out.metadata == {"k": "v"}
    assert out.usage is not None and out.usage.input_tokens_details.cached_tokens == 20
    assert out.usage.input_tokens_details.cache_write_tokens == 4


def test_text_then_parallel_calls_stream_as_valid_events() -> None:
    wire = _wire()
    encoder = wire.stream()
    raw = b"".join(
        encoder.chunk(c)
        for c in [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Let me "}),
            _chunk({"content": "check."}),
            _chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                    "function": {"name": "a", "arguments": ""}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
            _chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                    "function": {"name": "b", "arguments": "{}"}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            _chunk({}, "tool_calls"),
        ]
    ) + encoder.end({"choices": [], "usage": USAGE})  # fmt: skip
    events = _events(raw)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[1].type == "response.in_progress"
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.status == "completed"
    assert [(i.type, getattr(i, "call_id", None)) for i in final.output] == [
        ("message", None), ("function_call", "call_a"), ("function_call", "call_b")
    ]  # fmt: skip
    assert final.output[1].arguments == '{"x":1}' and final.output_text == "Let me check."
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    done = [e.item.id for e in events if e.type == "response.output_item.done"]
    assert added == [i.id for i in final.output] and sorted(done) == sorted(added)
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(e.delta for e in deltas if e.item_id == added[1]) == '{"x":1}'
    for e in events:  # every event that names an item gives its place in the output
        if hasattr(e, "output_index") and hasattr(e, "item_id"):
            assert added[e.output_index] == e.item_id
    assert final.usage is not None and final.usage.input_tokens == 30


@pytest.mark.parametrize(("finish", "reason"), [("content_filter", "content_filter"),
                                                ("length", "max_output_tokens")])  # fmt: skip
def test_a_cut_stream_ends_incomplete(finish: str, reason: str) -> None:
    wire = _wire()
    encoder = wire.stream()
    raw = encoder.chunk(_chunk({"content": "Some"})) + encoder.chunk(_chunk({}, finish))
    events = _events(raw + encoder.end(None))
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == reason
    item_done = next(e for e in events if e.type == "response.output_item.done")
    assert item_done.item.status == "incomplete"


def test_an_error_after_the_first_byte_is_response_failed() -> None:
    wire = _wire()
    encoder = wire.stream()
    raw = encoder.chunk(_chunk({"content": "Half"}))
    events = _events(raw + encoder.error(UpstreamConnectError("the upstream went away")))
    failed = events[-1]
    assert failed.type == "response.failed" and failed.response.status == "failed"
    assert failed.response.error is not None and failed.response.error.code == "server_error"
    assert "went away" in failed.response.error.message


def test_an_empty_stream_still_opens_and_completes() -> None:
    encoder = _wire().stream()
    events = _events(encoder.end(None))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.completed"
    ]  # fmt: skip
