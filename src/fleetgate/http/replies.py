"""JSON replies (orjson, like the request path)."""

from __future__ import annotations

import orjson
from aiohttp import web

__all__ = ["json_reply"]


def json_reply(value: object, status: int = 200) -> web.Response:
    """``value`` as an ``application/json`` response."""
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")
