"""Reading request bodies: size limit, JSON, object at the top."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from fleetgate.errors import InvalidRequest, PayloadTooLarge, RequestTimeout
from fleetgate.http.depth import holds_more_values, nests_deeper
from fleetgate.http.text import check_json_text

__all__ = [
    "BODY_TIMEOUT_S",
    "MAX_CONTAINERS",
    "MAX_DEPTH",
    "MAX_VALUES",
    "decode_object",
    "read_json",
]

BODY_TIMEOUT_S = 30.0  # the default of server.body_timeout_s

MAX_DEPTH = 128  # JSON nesting a request body may have
# Values and containers a request body may hold. Parsing builds each one on the event loop
# (orjson holds the interpreter: five million empty arrays, 14 MiB, held it 1.6 s). Arrays and
# objects cost ten times a number, so they have the lower bound: 2^16 of them and 2^20 values
# parse in tens of milliseconds, and leave room for real requests (a 5,000-message
# conversation, large tool schemas, embedding inputs of a million tokens as token arrays).
MAX_VALUES = 1 << 20
MAX_CONTAINERS = 1 << 16


async def read_json(
    request: web.Request, max_bytes: int, timeout_s: float = BODY_TIMEOUT_S
) -> dict[str, Any]:
    """The JSON object in the body; 413 past ``max_bytes``, 400 when it is not a JSON object
    or holds text no store can hold (a NUL, a lone surrogate), 408 when it has not arrived
    within ``timeout_s``."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(f"Request body of {length} bytes exceeds the {max_bytes} limit.")
    try:
        if request.content.is_eof():  # all of it came with the headers: nothing to wait for
            raw = await request.read()
        else:
            async with asyncio.timeout(timeout_s):
                raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"Request body exceeds the {max_bytes} byte limit.") from None
    except TimeoutError:
        raise RequestTimeout(f"The request body did not arrive within {timeout_s:g} s.") from None
    return decode_object(raw, max_bytes)


def decode_object(
    raw: bytes,
    max_bytes: int,
    *,
    what: str = "The request body",
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
    max_containers: int = MAX_CONTAINERS,
) -> dict[str, Any]:
    """The JSON object in ``raw`` under the limits every request body has: 413 past
    ``max_bytes``, ``max_values`` values or ``max_containers`` arrays and objects (counted
    before parsing), 400 when it is empty, not
    JSON, not an object, or nests deeper than ``max_depth``. The one check of an HTTP body and
    of a batch line (``what`` names it in the message; a line is one level deeper than its
    body)."""
    size = len(raw)
    if size > max_bytes:
        raise PayloadTooLarge(f"{what} exceeds the {max_bytes} byte limit.")
    if not raw:
        raise InvalidRequest(f"{what} is empty; expected a JSON object.")
    # counted before the parse that would build them
    brackets = raw.count(b"[") + raw.count(b"{")  # C-speed; both checks below start from it
    # every value and every bracket takes a byte at least: a body no longer than both limits
    # cannot hold more (most bodies; no call to count them)
    over = None
    if size > max_values or size > max_containers:
        over = holds_more_values(raw, max_values, max_containers, brackets=brackets)
    if over:
        limit = max_values if over == "values" else max_containers
        raise PayloadTooLarge(f"{what} holds more than {limit} JSON {over}.")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what} must be a JSON object.")
    # Deep nesting parses (orjson allows 1024 levels) but cannot be re-encoded for the upstream
    # (254): refuse it here. Counting brackets is C-fast; only a body with many is measured,
    # from its bytes (walking the parsed value held the event loop ~2 s for 16 MiB).
    if brackets > max_depth and nests_deeper(raw, max_depth):
        raise InvalidRequest(f"{what} nests deeper than {MAX_DEPTH} levels.")
    if b"\\u0000" in raw:  # maybe a NUL no store can hold: 400 naming where it is
        check_json_text(raw, value)
    return value
