"""How deep a JSON text nests and how many values it holds, read from its bytes at C and
numpy speed.

Walking the parsed value visits every object and array in Python: a 16 MiB body of small
objects (1.5 million of them) held the event loop for about two seconds. Here the text is
reduced with bytes operations to its quotes and brackets, and which brackets are outside
strings and the running depth are cumulative sums (numpy, in chunks of 1 MiB): about a tenth
of the time the parse itself takes.

Parsing itself is the other cost a body's shape sets: orjson builds every value while holding
the interpreter, so a 16 MiB body of five million empty arrays held the event loop for over a
second. ``holds_more_values`` counts a text's values and its arrays and objects before it is
parsed, so such a body is refused for the few milliseconds of a count.

Example::

    nests_deeper(b'{"a": [[1]]}', 2)    # True: three levels
    holds_more_values(b'[1, 2, [3]]', 3, 8)  # 'values': four of them
"""

from __future__ import annotations

import numpy as np

__all__ = ["holds_more_values", "nests_deeper"]

_STRUCTURE = frozenset(b'"[]{}')
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in _STRUCTURE)
_ITEMS = frozenset(b'"[{,')
_NOT_ITEMS = bytes(c for c in range(256) if c not in _ITEMS)
_CHUNK = 1 << 20
_QUOTE = ord('"')
_COMMA = ord(",")
_STEP = np.zeros(256, np.int8) - 1  # ] and } close a level, [ and { open one
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP.flags.writeable = False


def nests_deeper(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` (valid JSON: call it after parsing) nests more than
    ``limit`` objects and arrays deep."""
    # In valid JSON a backslash is always inside a string and starts an escape: drop escaped
    # backslashes (left to right, so a run pairs from its start), then escaped quotes. Every
    # quote left delimits a string, and a bracket after an odd number of them is a string's.
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    quotes = depth = 0
    for start in range(0, len(text), _CHUNK):
        chunk = np.frombuffer(text, np.uint8, min(_CHUNK, len(text) - start), start)
        is_quote = chunk == _QUOTE
        seen = np.cumsum(is_quote, dtype=np.int32) + quotes
        outside = ((seen & 1) == 0) & ~is_quote
        levels = np.cumsum(np.where(outside, _STEP[chunk], 0), dtype=np.int32) + depth
        if int(levels.max()) > limit:
            return True
        quotes, depth = int(seen[-1]), int(levels[-1])
    return False


def holds_more_values(
    raw: bytes, items: int, containers: int, *, brackets: int | None = None
) -> str | None:
    """What the JSON text ``raw`` holds too many of, if anything: ``"values"`` past ``items``
    (commas and opening brackets outside strings: every value but the first of each array or
    object follows a comma, and every array and object opens with a bracket), ``"arrays and
    objects"`` past ``containers`` (opening brackets outside strings: each one costs the parse
    a Python object of its own, ten times a number). Cheap enough to call before parsing; on
    text that is not JSON the counts are only approximate. ``brackets``: ``raw``'s count of
    ``[`` and ``{``, when the caller has it already."""
    opening = raw.count(b"[") + raw.count(b"{") if brackets is None else brackets
    if opening <= containers and opening + raw.count(b",") <= items:
        return None  # C-speed upper bounds: brackets and commas inside strings counted too
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_ITEMS)
    quotes = counted = opened = 0
    for start in range(0, len(text), _CHUNK):
        chunk = np.frombuffer(text, np.uint8, min(_CHUNK, len(text) - start), start)
        is_quote = chunk == _QUOTE
        seen = np.cumsum(is_quote, dtype=np.int64) + quotes
        outside = ((seen & 1) == 0) & ~is_quote
        counted += int(np.count_nonzero(outside))
        opened += int(np.count_nonzero(outside & (chunk != _COMMA)))
        if opened > containers:
            return "arrays and objects"
        if counted > items:
            return "values"
        quotes = int(seen[-1])
    return None
