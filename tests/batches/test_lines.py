"""Reading a batch's lines: each line passes the checks a request body passes, and fails alone."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fleetgate.batches.lines import check_lines, read_lines
from fleetgate.errors import ClientError
from fleetgate.http.body import decode_object
from tests.batches.support import chat_line, jsonl

CHAT = "/v1/chat/completions"
LIMIT = 1024 * 1024


def nested(levels: int) -> dict[str, Any]:
    """A chat body ``levels`` deep (the body itself is level 1)."""
    value: Any = "x"
    for _ in range(levels - 3):  # messages (2) and its first message (3) hold the rest
        value = [value]
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi", "extra": value}]}


def line_of(body: dict[str, Any], custom_id: str = "c1") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def direct_error(body: dict[str, Any]) -> str | None:
    """What the HTTP body path says of ``body`` (None: accepted)."""
    try:
        decode_object(orjson.dumps(body), LIMIT)
    except ClientError as exc:
        return exc.message
    return None


def test_a_line_nested_deeper_than_a_body_may_be_is_refused_alone() -> None:
    deep, ok = nested(200), nested(128)
    assert direct_error(deep) is not None and direct_error(ok) is None  # the direct path
    content = jsonl([line_of(deep, "deep"), line_of(ok, "ok"), chat_line("plain")])
    first, second, third = read_lines(content, CHAT, LIMIT)
    assert first.body is None and first.custom_id == "deep"
    assert first.error is not None and "nests deeper than 128 levels" in first.error
    assert second.body == ok and second.error is None  # as deep as a body may be: sent
    assert third.body is not None


def test_a_line_larger_than_a_request_body_may_be_is_refused_alone() -> None:
    big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 10_000}]}
    content = jsonl([line_of(big, "big"), chat_line("small")])
    big_line, small = read_lines(content, CHAT, 4096)
    assert big_line.body is None and big_line.code == "payload_too_large"
    assert big_line.custom_id == "big"
    assert big_line.error is not None and "byte limit" in big_line.error
    assert small.body is not None
    assert read_lines(content, CHAT, LIMIT)[0].body == big  # under the limit: sent


@pytest.mark.parametrize("custom_id", ["a\x00b", "\x00", "tab\there", "bell\x07", "c1\x85"])
def test_a_custom_id_with_control_characters_is_an_invalid_line(custom_id: str) -> None:
    content = jsonl([chat_line(custom_id), chat_line("fine")])
    bad, fine = read_lines(content, CHAT, LIMIT)
    assert bad.body is None and bad.custom_id is None
    assert bad.error is not None and "custom_id" in bad.error
    assert fine.body is not None and fine.custom_id == "fine"
    check_lines([bad, fine], 10)  # the batch may still be made: the line fails alone


def test_unicode_custom_ids_are_kept() -> None:
    (line,) = read_lines(jsonl([chat_line("réponse-1 ✓ 答")]), CHAT, LIMIT)
    assert line.custom_id == "réponse-1 ✓ 答" and line.body is not None
