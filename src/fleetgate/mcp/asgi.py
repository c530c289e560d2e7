"""Serve one aiohttp request with an ASGI application (the MCP SDK's streamable-HTTP transport).

The gateway is an aiohttp app; the SDK's server transport is ASGI. `serve_asgi` turns the
request into an ASGI ``http`` scope (``extra`` adds keys to it: how the authenticated principal
reaches the MCP handlers), feeds the body already read (aiohttp's ``client_max_size`` bounds
it), and writes what the application sends back, streaming included::

    response = await serve_asgi(manager.handle_request, request, {"fleetgate.principal": p})
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from aiohttp import web

__all__ = ["ASGIApp", "serve_asgi"]

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]


def _scope(request: web.Request, extra: Mapping[str, Any]) -> dict[str, Any]:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": {},
        **extra,
    }


async def serve_asgi(
    app: ASGIApp, request: web.Request, extra: Mapping[str, Any] | None = None
) -> web.StreamResponse:
    """Run ``app`` for ``request``; the response it sent (a 500 if it sent none)."""
    body = await request.read()
    sent_body = False
    finished = asyncio.Event()
    response: web.StreamResponse | None = None

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # nothing more to read: "disconnected" once the reply is out
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=int(message["status"]))
            for name, value in message.get("headers", ()):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            chunk = message.get("body", b"")
            if chunk:
                await response.write(chunk)
            if not message.get("more_body", False):
                await response.write_eof()
                finished.set()

    try:
        await app(_scope(request, extra or {}), receive, send)
    finally:
        finished.set()
    if response is None:
        return web.json_response(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "Internal error"}},
            status=500,
        )
    return response
