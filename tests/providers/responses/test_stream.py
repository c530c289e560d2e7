"""A native Responses answer (events, or the whole object) -> the chat form the stages read."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.errors import UpstreamBadResponse, UpstreamStatusError
from fleetgate.providers.responses.response import responses_to_chat
from fleetgate.providers.responses.stream import ResponsesStreamTranslator

USAGE = {
    "input_tokens": 12, "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 2},
    "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 17,
}  # fmt: skip
CHAT_USAGE = {
    "prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
    "prompt_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 2},
    "completion_tokens_details": {"reasoning_tokens": 3},
}  # fmt: skip


def _deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]


def test_text_reasoning_and_a_function_call_stream_as_chat_chunks() -> None:
    t = ResponsesStreamTranslator("alias-model", created=5)
    # Nothing before the first output: the upstream has not answered until it writes some.
    assert t.feed({"type": "response.created", "response": {"id": "resp_1"}}) == []
    assert t.feed({"type": "response.in_progress"}) == []
    out: list[dict[str, Any]] = []
    for event in [
        {"type": "response.reasoning_summary_text.delta", "delta": "think"},
        {"type": "response.output_item.added", "item": {"type": "message", "id": "msg_1"}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hel"},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "lo"},
        {"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc_1",
                                                         "call_id": "call_1", "name": "f"}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"a"'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": ":1}"},
        {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "x"},
        {"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc_2",
                                                         "call_id": "call_2", "name": "g"}},
        {"type": "response.output_item.done", "item": {"type": "function_call", "id": "fc_2",
                                                        "arguments": "{}"}},
        {"type": "response.completed", "response": {"status": "completed", "usage": USAGE}},
    ]:  # fmt: skip
        out.extend(t.feed(event))
    assert t.finished and all(c["id"] == "resp_1" and c["model"] == "alias-model" for c in out)
    assert _deltas(out) == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "think"},
        {"content": "Hel"},
        {"content": "lo"},
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                         "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]},
        {"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                         "function": {"name": "g", "arguments": ""}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},  # only whole, at done
        {},
    ]  # fmt: skip
    assert out[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert out[-1]["choices"] == [] and out[-1]["usage"] == CHAT_USAGE


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
def test_an_incomplete_response_finishes_with_the_chat_reason(reason: str, finish: str) -> None:
    t = ResponsesStreamTranslator("m", created=0)
    end = {"status": "incomplete", "incomplete_details": {"reason": reason}, "usage": USAGE}
    (role, done, usage) = t.feed({"type": "response.incomplete", "response": end})
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert done["choices"][0]["finish_reason"] == finish and usage["usage"] == CHAT_USAGE


def test_a_failed_response_or_an_error_event_raises_the_upstreams_failure() -> None:
    t = ResponsesStreamTranslator("m", created=0)
    failed = {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}}
    with pytest.raises(UpstreamStatusError) as caught:
        t.feed({"type": "response.failed", "response": failed})
    assert caught.value.status == 429
    with pytest.raises(UpstreamStatusError) as caught:
        t.feed({"type": "error", "code": "server_error", "message": "boom"})
    assert caught.value.status == 502 and caught.value.retryable
    with pytest.raises(UpstreamBadResponse):
        t.feed({"type": "error", "code": "invalid_prompt", "message": "no"})


def test_a_whole_response_becomes_a_chat_completion() -> None:
    response = {
        "id": "resp_9", "object": "response", "created_at": 7, "status": "completed",
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Hi "},
                                            {"type": "refusal", "refusal": "no."}]},
            {"type": "function_call", "call_id": "call_3", "name": "f", "arguments": "{}"},
        ],
        "usage": USAGE,
    }  # fmt: skip
    chat = responses_to_chat(response, "alias")
    assert chat["choices"] == [{"index": 0, "logprobs": None, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "Hi no.", "reasoning_content": "hmm",
                    "tool_calls": [{"id": "call_3", "type": "function",
                                    "function": {"name": "f", "arguments": "{}"}}]}}]  # fmt: skip
    assert chat["usage"] == CHAT_USAGE and chat["model"] == "alias"
    with pytest.raises(UpstreamBadResponse):
        responses_to_chat({"object": "chat.completion"}, "alias")
    with pytest.raises(UpstreamStatusError):
        responses_to_chat({"status": "failed", "error": {"code": "server_error"}}, "alias")
