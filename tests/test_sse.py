"""The SSE parser, the encoder and the byte-level framer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.sse import SSEBatches, SSEParser, encode_sse, iter_sse_batches

STREAM = (
    b": a comment the parser must skip\n"
    b"event: message_start\n"
    b'data: {"type": "message_start", "text": "h\xc3\xa9llo \xf0\x9f\x8c\x8d"}\n'
    b"\n"
    b"event: ping\r\n"
    b'data: {"type": "ping"}\r\n'
    b"\r\n"
    b"data: line one\r"
    b"data:line two\r"
    b"\r"
    b"event: empty\n"
    b"\n"
    b"event: content_block_delta\n"
    b"data: {}\n"
    b"\n"
)
EXPECTED = [
    ("message_start", '{"type": "message_start", "text": "h\u00e9llo \U0001f30d"}'),
    ("ping", '{"type": "ping"}'),
    ("message", "line one\nline two"),
    ("content_block_delta", "{}"),
]


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[tuple[str, str]]:
    parser = SSEParser()
    events: list[tuple[str, str]] = []
    start = 0
    for cut in sorted(set(cuts)):
        events += parser.feed(data[start:cut])
        start = cut
    events += parser.feed(data[start:])
    return events


def test_whole_stream_at_once() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


def test_one_byte_at_a_time() -> None:
    parser = SSEParser()
    events = [e for i in range(len(STREAM)) for e in parser.feed(STREAM[i : i + 1])]
    assert events == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    assert feed_in_pieces(STREAM, cuts) == EXPECTED


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["message_start", "content_block_delta", "ping"]),
            st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3),
        ),
        max_size=6,
    ),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
)
def test_encoded_events_parse_back_under_any_split(
    events: list[tuple[str, dict[str, str]]], cuts: list[int]
) -> None:
    wire = b"".join(encode_sse(name, data) for name, data in events)
    parsed = feed_in_pieces(wire, [c for c in cuts if c <= len(wire)])
    assert [(name, json.loads(data)) for name, data in parsed] == events


def test_incomplete_event_at_end_is_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: message_stop\ndata: {}") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\n") == [("message_stop", "{}")]


def test_two_crs_in_a_row_are_two_line_ends_wherever_the_bytes_are_cut() -> None:
    wire = b"data: a\r\rdata: b\r\n\r\nevent: e\r\ndata: c\r\r"
    expected = [("message", "a"), ("message", "b"), ("e", "c")]
    for cut in range(len(wire) + 1):
        assert feed_in_pieces(wire, [cut]) == expected, cut


def test_end_dispatches_an_event_sent_without_its_blank_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: {}\n\ndata: [DO") == [("message", "{}")]
    assert parser.feed(b"NE]") == []
    assert parser.end() == [("message", "[DONE]")]
    parser = SSEParser()
    assert parser.feed(b"event: x\ndata: 1\n") == []
    assert parser.end() == [("x", "1")]
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\n: comment") == [("message", "1")]
    assert parser.end() == []


def test_leading_bom_is_ignored() -> None:
    assert SSEParser().feed(b"\xef\xbb\xbfdata: x\n\n") == [("message", "x")]


def test_encode_without_event_name_is_plain_data_frame() -> None:
    assert encode_sse(None, {"a": 1}) == b'data: {"a":1}\n\n'
    assert encode_sse("ping", {"type": "ping"}) == b'event: ping\ndata: {"type":"ping"}\n\n'


async def _pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def test_framer_yields_whole_frames_per_read_as_the_bytes_that_came_in() -> None:
    reads = (b'data: {"a":1}\n\ndata: {"b"', b":2}\n\n", b"data: [DONE]\n\n")
    batches = [batch async for batch in iter_sse_batches(_pieces(*reads))]
    assert batches == [[b'data: {"a":1}\n\n'], [b'data: {"b":2}\n\n'], [b"data: [DONE]\n\n"]]


async def test_framer_accepts_crlf_and_a_last_frame_without_blank_line() -> None:
    reads = (b"data: 1\r\n\r\ndata: 2\r\n\r\n", b"data: 3\n")
    batches = [batch async for batch in iter_sse_batches(_pieces(*reads))]
    assert batches == [[b"data: 1\n\n", b"data: 2\n\n"], [b"data: 3\n\n"]]


async def test_framer_reading_a_connection_maps_its_errors_and_notes_the_end() -> None:
    reads = [b'data: {"a":1}\n\n', b'data: {"b"', b':2}\n\ndata: {"c":3}\n\n', b""]

    async def read() -> bytes:
        return reads.pop(0)

    batches = SSEBatches(read)
    assert [b async for b in batches] == [
        [b'data: {"a":1}\n\n'],
        [b'data: {"b":2}\n\n', b'data: {"c":3}\n\n'],
    ]
    assert batches.ended

    async def broken() -> bytes:
        raise ConnectionResetError("gone")

    mapped = SSEBatches(broken, errors=lambda exc: LookupError(f"mapped: {exc}"))
    with pytest.raises(LookupError, match="mapped: gone"):
        await anext(mapped)
    assert not mapped.ended
