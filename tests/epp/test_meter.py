"""Usage, chunks and the injected usage event, read from a streamed response body."""

from __future__ import annotations

import orjson

from fleetgate.contract.request import Outcome
from fleetgate.epp.meter import ResponseMeter


def _event(choices: list[object], usage: object = None) -> bytes:
    return b"data: " + orjson.dumps({"choices": choices, "usage": usage}) + b"\n\n"


TOKEN = _event([{"delta": {"content": "hi"}}])
USAGE = _event([], {"prompt_tokens": 7, "completion_tokens": 2})
DONE = b"data: [DONE]\n\n"


def test_the_injected_usage_event_is_taken_out_and_read() -> None:
    out = Outcome()
    meter = ResponseMeter(out, stream=True, strip_usage=True)
    assert meter.feed(TOKEN, False) is None  # unchanged chunks travel as they are
    assert meter.feed(TOKEN + USAGE + DONE, True) == TOKEN + DONE
    assert (out.prompt_tokens, out.completion_tokens, out.relayed) == (7, 2, 2)
    assert out.first_token_at is not None


def test_usage_the_client_asked_for_is_left_in_place() -> None:
    out = Outcome()
    meter = ResponseMeter(out, stream=True, strip_usage=False)
    assert meter.feed(TOKEN + USAGE + DONE, True) is None
    assert out.completion_tokens == 2


def test_an_event_split_over_chunks_is_held_until_it_is_whole() -> None:
    out = Outcome()
    meter = ResponseMeter(out, stream=True, strip_usage=True)
    head, tail = USAGE[:10], USAGE[10:]
    assert meter.feed(TOKEN + head, False) == TOKEN  # the partial event waits
    assert meter.feed(tail + DONE, True) == DONE  # whole now, and taken out
    assert out.completion_tokens == 2


def test_a_json_answer_gives_usage_and_finish_reason_at_its_end() -> None:
    out = Outcome()
    meter = ResponseMeter(out, stream=False, strip_usage=True)
    body = orjson.dumps({"id": "c1", "choices": [{"finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 4}})  # fmt: skip
    assert meter.feed(body[:5], False) is None
    assert meter.feed(body[5:], True) is None
    assert (out.prompt_tokens, out.completion_tokens) == (3, 4)
    assert (out.finish_reason, out.response_id) == ("stop", "c1")


def test_a_stream_cut_before_its_usage_counts_what_was_relayed() -> None:
    out = Outcome()
    meter = ResponseMeter(out, stream=True, strip_usage=True)
    for _ in range(3):
        meter.feed(TOKEN, False)
    assert (out.relayed, out.completion_tokens, meter.saw_usage) == (3, 0, False)
