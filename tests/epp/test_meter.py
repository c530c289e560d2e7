"""Usage, chunks and the injected usage event, read from a streamed response body."""

from __future__ import annotations

import random

import orjson
import pytest

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


def test_chunks_of_whole_token_events_are_counted_without_the_event_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The common chunk (one or more whole token events, no usage, no ``[DONE]``) is counted
    in a few scans, not read event by event: most of a streamed answer's CPU in the picker."""

    def walk(*_: object, **__: object) -> bytes:
        raise AssertionError("read event by event")

    for strip in (False, True):
        out = Outcome()
        meter = ResponseMeter(out, stream=True, strip_usage=strip)
        monkeypatch.setattr(ResponseMeter, "_events", walk)
        assert meter.feed(TOKEN, False) is None
        assert meter.feed(TOKEN + TOKEN + TOKEN, False) is None
        assert out.relayed == 4 and out.first_token_at is not None
        with pytest.raises(AssertionError):  # usage is read in full
            meter.feed(USAGE, False)


SHAPES = [TOKEN, USAGE, DONE, b"\n\n", b"\n", b": ping\n\n", b" " + TOKEN, b"data: [DONE] \n\n",
          b"data:", b'{"x":1}', b"\n\n\n", _event([{"delta": {}}], None),
          b'data: {"choices":[]}\n\n',
          b'data: {"usage": null}\n\n', b'data: {"usage":null,"x":"usage"}\n\n', b"}\n\n",
          b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n']  # fmt: skip


@pytest.mark.parametrize("strip", [False, True])
def test_the_short_cut_counts_as_the_event_walk_does(
    monkeypatch: pytest.MonkeyPatch, strip: bool
) -> None:
    """Random streams of odd events cut at random places: the same replies, usage and counts
    with the short cut as with every chunk read event by event."""
    rng = random.Random(7)
    for _ in range(2000):
        stream = b"".join(rng.choice(SHAPES) for _ in range(rng.randint(1, 8)))
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 5))))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        seen = []
        for short_cut in (True, False):
            out = Outcome()
            meter = ResponseMeter(out, stream=True, strip_usage=strip)
            with monkeypatch.context() as patch:
                if not short_cut:
                    patch.setattr(ResponseMeter, "_plain", lambda _self, _chunk: False)
                replies = [meter.feed(c, i == len(chunks) - 1) for i, c in enumerate(chunks)]
            seen.append((replies, out.relayed, out.prompt_tokens, out.completion_tokens,
                         meter.saw_usage, out.first_token_at is None))  # fmt: skip
        assert seen[0] == seen[1], chunks


def test_the_chunk_hook_runs_once_when_its_chunk_is_relayed() -> None:
    """`Outcome.at_chunk` (the scheduler's ``start_before_end``) fires as the relay's does,
    on the one-event fast path and on a read of several events alike."""
    for chunks in ([TOKEN, TOKEN, TOKEN, TOKEN], [TOKEN + TOKEN, TOKEN + TOKEN]):
        out = Outcome()
        calls: list[int] = []
        out.at_chunk, out.on_chunk = 3, lambda o=out, c=calls: c.append(o.relayed)
        meter = ResponseMeter(out, stream=True, strip_usage=True)
        for chunk in chunks:
            meter.feed(chunk, False)
        assert calls == [3] if len(chunks) == 4 else calls == [4]
        assert out.on_chunk is None
