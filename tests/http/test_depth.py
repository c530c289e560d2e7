"""How deep a JSON body nests, read from its bytes (`fleetgate.http.depth`): the same answer as
walking the parsed value, for a fraction of the time the parse itself takes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.errors import PayloadTooLarge
from fleetgate.http.body import MAX_VALUES, decode_object
from fleetgate.http.depth import holds_more_values, nests_deeper

# Strings that would fool a count of brackets: brackets, quotes, backslashes, escapes.
tricky = st.sampled_from(['"', "\\", '\\"', "[", "]", "{", "}", '["', "\\\\", "\\u005b"]) | st.text(
    max_size=6
)
json_value = st.recursive(
    st.none() | st.integers() | tricky,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky, inner, max_size=3),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=json_value, ensure_ascii=st.booleans())
def test_the_depth_read_from_bytes_is_the_depth_of_the_value(
    value: Any, ensure_ascii: bool
) -> None:
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode()
    depth = _depth(value)
    for limit in {0, max(depth - 1, 0), depth, depth + 1}:
        assert nests_deeper(raw, limit) == (depth > limit), (raw, limit, depth)


def _fastest(run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def test_a_large_body_of_small_objects_is_checked_in_a_fraction_of_its_parse() -> None:
    # 4 MiB of small objects: walking the parsed value took several times the parse (16 MiB
    # held the event loop ~2 s); the check from the bytes costs less than the parse itself.
    raw = b'{"x": [' + b'{"b": 1}, ' * 400_000 + b"1]}"
    parse = _fastest(lambda: orjson.loads(raw))
    check = _fastest(lambda: decode_object(raw, len(raw), max_values=len(raw)))
    assert check < 2.5 * parse, (check, parse)


def _items(value: Any) -> int:
    """Commas and opening brackets a JSON text of ``value`` has outside strings."""
    if isinstance(value, dict):
        return 1 + max(len(value) - 1, 0) + sum(map(_items, value.values()))
    if isinstance(value, list):
        return 1 + max(len(value) - 1, 0) + sum(map(_items, value))
    return 0


@settings(max_examples=300, deadline=None)
@given(value=json_value, ensure_ascii=st.booleans())
def test_the_items_counted_from_bytes_are_those_of_the_value(
    value: Any, ensure_ascii: bool
) -> None:
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode()
    items = _items(value)
    for limit in {0, max(items - 1, 0), items, items + 1}:
        assert holds_more_values(raw, limit) == (items > limit), (raw, limit, items)


def test_a_body_of_millions_of_empty_arrays_is_refused_before_it_is_parsed() -> None:
    # 14 MiB of empty arrays took orjson 1.6 s to build, all of it on the event loop.
    raw = b'{"x": [' + b"[], " * 3_500_000 + b"1]}"
    with pytest.raises(PayloadTooLarge, match="JSON values"):
        decode_object(raw, len(raw))
    parse = _fastest(lambda: orjson.loads(raw))
    refuse = _fastest(lambda: holds_more_values(raw, MAX_VALUES))
    assert refuse < parse / 4, (refuse, parse)


def test_real_requests_stay_under_the_value_limit() -> None:
    # An embeddings call of 256k tokens as 16 token arrays, a conversation of 5,000 messages.
    tokens = {"model": "m", "input": [list(range(16_000)) for _ in range(16)]}
    chat = {"model": "m", "messages": [{"role": "user", "content": "a, b, [c]"}] * 5_000}
    for body in (tokens, chat):
        assert decode_object(orjson.dumps(body), 1 << 24) == body
