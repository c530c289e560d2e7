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
from fleetgate.http.body import MAX_CONTAINERS, MAX_VALUES, decode_object
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
    check = _fastest(
        lambda: decode_object(raw, len(raw), max_values=len(raw), max_containers=len(raw))
    )
    assert check < 2.5 * parse, (check, parse)


def _items(value: Any) -> tuple[int, int]:
    """Commas and opening brackets, and opening brackets alone, that a JSON text of ``value``
    has outside strings."""
    if isinstance(value, dict | list):
        inner = list(value.values()) if isinstance(value, dict) else value
        counts = [_items(v) for v in inner]
        items = 1 + max(len(inner) - 1, 0) + sum(c[0] for c in counts)
        return items, 1 + sum(c[1] for c in counts)
    return 0, 0


@settings(max_examples=300, deadline=None)
@given(value=json_value, ensure_ascii=st.booleans())
def test_the_values_counted_from_bytes_are_those_of_the_value(
    value: Any, ensure_ascii: bool
) -> None:
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode()
    items, containers = _items(value)
    for limit in {0, max(items - 1, 0), items, items + 1}:
        over = holds_more_values(raw, limit, containers)
        assert over == ("values" if items > limit else None), (raw, limit, items)
    for limit in {0, max(containers - 1, 0), containers, containers + 1}:
        over = holds_more_values(raw, items, limit)
        assert over == ("arrays and objects" if containers > limit else None), (raw, limit)


@pytest.mark.parametrize(("item", "over"), [(b"[], ", "arrays and objects"), (b"1, ", "values")])
def test_a_body_of_millions_of_values_is_refused_before_it_is_parsed(
    item: bytes, over: str
) -> None:
    # 14 MiB of empty arrays (3.5M) took orjson 1.6 s to build, all of it on the event loop;
    # 1.2M of them (past both limits) show the same at a third of the test's time.
    raw = b'{"x": [' + item * 1_200_000 + b"1]}"
    with pytest.raises(PayloadTooLarge, match=over):
        decode_object(raw, len(raw))
    if over == "arrays and objects":  # the costly kind: counting is a fraction of the parse
        parse = _fastest(lambda: orjson.loads(raw))
        refuse = _fastest(lambda: holds_more_values(raw, MAX_VALUES, MAX_CONTAINERS))
        assert refuse < parse / 2, (refuse, parse)


def test_real_requests_stay_under_the_limits() -> None:
    # An embeddings call of a million tokens as 128 token arrays, a conversation of 5,000
    # messages with commas and brackets in its text.
    tokens = {"model": "m", "input": [list(range(8_000)) for _ in range(128)]}
    chat = {"model": "m", "messages": [{"role": "user", "content": "a, b, [c]"}] * 5_000}
    for body in (tokens, chat):
        assert decode_object(orjson.dumps(body), 1 << 24) == body
