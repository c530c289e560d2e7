"""`content_text`: one reader of message text, with each caller's way of joining and judging."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.messages_text import content_text

PARTS: list[Any] = [
    {"type": "text", "text": "look"},
    {"type": "image_url", "image_url": {"url": "x"}},
    {"type": "text", "text": "here"},
]


def test_strings_are_as_is_and_other_values_empty() -> None:
    assert content_text("hi") == "hi"
    assert content_text(None) == "" and content_text(5) == "" and content_text({}) == ""


def test_text_parts_joined_with_the_callers_separator() -> None:
    assert content_text(PARTS) == "look\nhere"  # safety, multimodal, stored turns
    assert content_text(PARTS, sep=" ") == "look here"  # semantic router
    assert content_text(PARTS, sep="") == "lookhere"  # prefix-aware routing


def test_which_parts_count_as_text() -> None:
    odd: list[Any] = [
        {"type": "text", "text": "a"},
        {"type": "input_text", "text": "b"},  # another type carrying a text
        {"text": "c"},  # no type at all
        {"type": "refusal", "refusal": "d"},
        "bare string",
        {"type": ["not", "hashable"], "text": "e"},
    ]
    assert content_text(odd, sep="|") == "a"
    assert content_text(odd, sep="|", types=None) == "a|b|c|e"  # any part with a text
    assert content_text(odd, sep="|", types=("text", "refusal")) == "a|d"


def test_a_text_part_without_a_string_is_skipped_or_coerced() -> None:
    parts: list[Any] = [
        {"type": "text", "text": "a"},
        {"type": "text"},
        {"type": "text", "text": 5},
        {"type": "text", "text": None},
    ]
    assert content_text(parts) == "a"
    assert content_text(parts, coerce=True) == "a\n\n5\nNone"  # str() of what is there


def test_other_parts_are_reported_in_order_and_may_refuse() -> None:
    seen: list[tuple[int, Any]] = []
    assert content_text(PARTS, on_other=lambda i, p: seen.append((i, p))) == "look\nhere"
    assert seen == [(1, PARTS[1])]

    def refuse(index: int, part: Any) -> None:
        raise ValueError(f"part {index}")

    with pytest.raises(ValueError, match="part 1"):
        content_text(PARTS, on_other=refuse)
    bad: list[Any] = [{"type": "text", "text": 1}]
    with pytest.raises(ValueError, match="part 0"):
        content_text(bad, on_other=refuse)  # a text part without a string is an "other"
