"""A batch's input lines, read from its JSONL file, and the lines of its output and error files.

An input line is OpenAI's request object::

    {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

`read_lines` never fails on one bad line: a line that is not JSON, not an object, or lacks a
field becomes a `BatchLine` with an ``error`` (an entry of the error file, without a request).
Each line passes the very check an HTTP request body passes (`fleetgate.http.body.decode_object`:
``server.max_request_bytes``, at most 128 levels of nesting below the body), so a line is
refused alone, with its reason, where the same body sent directly would be a 4xx. A
``custom_id`` is 1 to 512 characters without control characters (a NUL cannot be stored by
PostgreSQL: such a line could never be recorded as done).
What makes the whole file unusable (no lines, too many, a ``custom_id`` used twice) is
`check_lines`' 400 when the batch is created.

Output and error files hold one `BatchRequestOutput` per line, OpenAI's exact shape::

    {"id": "batch_req_...", "custom_id": "req-1",
     "response": {"status_code": 200, "request_id": "...", "body": {...}}, "error": null}

A request the path answered with an error status goes to the error file with its response;
a line that never became a request has ``"response": null`` and ``"error": {code, message}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from fleetgate.errors import ClientError, InvalidRequest
from fleetgate.http.body import MAX_DEPTH, decode_object

__all__ = ["BatchLine", "check_lines", "error_record", "output_record", "read_lines"]

_MAX_CUSTOM_ID = 512
_ENVELOPE_BYTES = 4096  # custom_id, method and url around the body


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One non-blank line of the input file (``line`` counts from 1 over all lines)."""

    line: int
    custom_id: str | None
    body: dict[str, Any] | None
    error: str | None = None  # why the line cannot be sent (it goes to the error file)
    code: str = "invalid_request"  # the error entry's code


def _split(content: bytes) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(content.split(b"\n"), start=1):
        if raw.strip():
            yield number, raw


def _valid_custom_id(value: Any) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= _MAX_CUSTOM_ID
        and not any(ch < " " or "\x7f" <= ch <= "\x9f" for ch in value)  # no NUL, no controls
    )


def _custom_id_of(raw: bytes) -> str | None:
    """The custom_id of a line refused as a whole, when it has a usable one."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    custom_id = value.get("custom_id") if isinstance(value, dict) else None
    return custom_id if _valid_custom_id(custom_id) else None


def _one(number: int, raw: bytes, endpoint: str, max_bytes: int) -> BatchLine:
    try:  # the line as a request body: one level of nesting (the envelope) above its body
        value = decode_object(
            raw, max_bytes + _ENVELOPE_BYTES, what=f"Line {number}", max_depth=MAX_DEPTH + 1
        )
    except ClientError as exc:
        code = exc.code or "invalid_request"
        return BatchLine(number, _custom_id_of(raw), None, exc.message, code)
    custom_id = value.get("custom_id")
    if not _valid_custom_id(custom_id):
        message = (
            f"line {number}: 'custom_id' must be a string of 1 to {_MAX_CUSTOM_ID} characters, "
            "without control characters"
        )
        return BatchLine(number, None, None, message)
    body = value.get("body")
    if value.get("method", "POST") != "POST":
        return BatchLine(number, custom_id, None, f"line {number}: 'method' must be POST")
    if value.get("url") != endpoint:
        return BatchLine(
            number, custom_id, None, f"line {number}: 'url' must be the batch's {endpoint}"
        )
    if not isinstance(body, dict):
        return BatchLine(number, custom_id, None, f"line {number}: 'body' must be an object")
    if body.get("stream") is True:
        return BatchLine(number, custom_id, None, f"line {number}: a batch cannot stream")
    return BatchLine(number, custom_id, body)


def read_lines(content: bytes, endpoint: str, max_bytes: int) -> list[BatchLine]:
    """The input file's non-blank lines, each parsed or with the reason it cannot run (a body
    is at most ``max_bytes``, the gateway's ``server.max_request_bytes``). CPU-bound on a
    large file: call it off the event loop (`asyncio.to_thread`)."""
    return [_one(number, raw, endpoint, max_bytes) for number, raw in _split(content)]


def check_lines(lines: list[BatchLine], max_lines: int) -> None:
    """400 for a file no batch can be made of."""
    if not lines:
        raise InvalidRequest("The input file has no requests.", param="input_file_id")
    if len(lines) > max_lines:
        raise InvalidRequest(
            f"The input file has {len(lines)} requests; a batch takes at most {max_lines}.",
            param="input_file_id",
            code="too_many_requests",
        )
    seen: set[str] = set()
    for line in lines:
        if line.custom_id is None:
            continue
        if line.custom_id in seen:
            raise InvalidRequest(
                f"The custom_id '{line.custom_id}' is used more than once (line {line.line}).",
                param="input_file_id",
                code="duplicate_custom_id",
            )
        seen.add(line.custom_id)


def _record_id(batch_id: str, line: int) -> str:
    return f"batch_req_{batch_id.removeprefix('batch_')}_{line}"


def output_record(
    batch_id: str, line: BatchLine, status: int, request_id: str, body: dict[str, Any]
) -> str:
    """The output (status < 400) or error file line of a request the path answered."""
    return orjson.dumps(
        {
            "id": _record_id(batch_id, line.line),
            "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": body},
            "error": None,
        }
    ).decode()


def error_record(batch_id: str, line: BatchLine, code: str, message: str) -> str:
    """The error file line of a line that never became a request."""
    return orjson.dumps(
        {
            "id": _record_id(batch_id, line.line),
            "custom_id": line.custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        }
    ).decode()
