"""Local request tracking: dispatch, first token, completion."""

from __future__ import annotations

from fleetgate.routing.load import LoadTracker, LocalLoad


def test_a_request_moves_from_prefill_to_decode_to_gone() -> None:
    tracker = LoadTracker()
    a = tracker.dispatched("e1", 1000)
    b = tracker.dispatched("e1", 200)
    assert tracker.load("e1") == LocalLoad(prefilling=2, prefill_tokens=1200, decoding=0)
    tracker.first_token(a)
    assert tracker.load("e1") == LocalLoad(prefilling=1, prefill_tokens=200, decoding=1)
    tracker.finished(a)
    tracker.finished(a)  # twice is harmless
    tracker.first_token(a)  # after the end, too
    assert tracker.load("e1") == LocalLoad(prefilling=1, prefill_tokens=200, decoding=0)
    tracker.finished(b)  # failed before its first token
    assert tracker.load("e1") == LocalLoad()
    assert tracker.loads() == {}


def test_engines_are_tracked_apart() -> None:
    tracker = LoadTracker()
    tracker.dispatched("e1", 10)
    tracker.dispatched("e2", 20)
    assert tracker.load("e1").prefill_tokens == 10
    assert tracker.load("e2").prefill_tokens == 20
    assert set(tracker.loads()) == {"e1", "e2"}
