"""Reading request bodies: size limit, JSON, object at the top."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from fleetgate.errors import InvalidRequest, PayloadTooLarge

__all__ = ["read_json"]


async def read_json(request: web.Request, max_bytes: int) -> dict[str, Any]:
    """The JSON object in the body; 413 past ``max_bytes``, 400 when it is not a JSON object."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(f"Request body of {length} bytes exceeds the {max_bytes} limit.")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"Request body exceeds the {max_bytes} byte limit.") from None
    if len(raw) > max_bytes:
        raise PayloadTooLarge(f"Request body exceeds the {max_bytes} byte limit.")
    if not raw:
        raise InvalidRequest("The request body is empty; expected a JSON object.")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return value
