"""An instant OpenAI-compatible upstream for the gateway overhead benchmark.

Answers ``POST /v1/chat/completions`` at once, as JSON or as SSE (a handful of chunks, a usage
chunk when ``stream_options.include_usage`` is set, then ``[DONE]``), plus ``GET /v1/models``,
``/health`` and a minimal ``/metrics``. Every body is encoded once at start-up; a request costs
one small JSON parse and a write. It is deliberately not fleetgate's engine simulator: the point
is an upstream whose own cost is as close to zero as Python allows.

    python bench/overhead/upstream.py --port 9100 [--workers 2]

With ``--workers N`` it forks N processes sharing the port (SO_REUSEPORT) so that the upstream
is never the bottleneck of the target behind it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
from dataclasses import dataclass, field

import orjson
import uvloop
from aiohttp import web

MODEL = "tiny"
CREATED = 1_700_000_000
WORDS = ("Hello", " from", " the", " instant", " upstream", ".")
JSON_HEADERS = {"Content-Type": "application/json"}
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _chunk(delta: dict[str, str], finish: str | None) -> dict[str, object]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _usage(words: int) -> dict[str, int]:
    return {"prompt_tokens": 8, "completion_tokens": words, "total_tokens": 8 + words}


def _event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


@dataclass(frozen=True)
class Bodies:
    """Every response body, encoded once."""

    completion: bytes
    sse_events: tuple[bytes, ...]
    sse_usage_event: bytes
    models: bytes

    @classmethod
    def build(cls, repeat: int = 1) -> Bodies:
        """Encode the completion, the SSE events, and the model list; a stream carries the
        words ``repeat`` times (``calls.py`` measures the cost of one chunk with a longer one)."""
        words = WORDS * repeat
        completion = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": CREATED,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(WORDS)},
                    "finish_reason": "stop",
                }
            ],
            "usage": _usage(len(WORDS)),
        }
        events = [_event(_chunk({"role": "assistant", "content": ""}, None))]
        events += [_event(_chunk({"content": word}, None)) for word in words]
        events.append(_event(_chunk({}, "stop")))
        usage_chunk = {**_chunk({}, None), "choices": [], "usage": _usage(len(words))}
        models = {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "created": CREATED, "owned_by": "bench"}],
        }
        return cls(
            completion=orjson.dumps(completion),
            sse_events=tuple(events),
            sse_usage_event=_event(usage_chunk),
            models=orjson.dumps(models),
        )


@dataclass
class Upstream:
    """The request handler; counts the completions it served for ``/metrics``."""

    bodies: Bodies = field(default_factory=Bodies.build)
    served: int = 0

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Dispatch on path without a router: this server has five routes."""
        path = request.path
        if path in ("/v1/chat/completions", "/chat/completions") and request.method == "POST":
            return await self._chat(request)
        if path in ("/v1/models", "/models"):
            return web.Response(body=self.bodies.models, headers=JSON_HEADERS)
        if path == "/health":
            return web.Response(body=b"{}", headers=JSON_HEADERS)
        if path == "/metrics":
            text = f"bench_upstream_requests_total {self.served}\n"
            return web.Response(text=text, content_type="text/plain")
        return web.Response(status=404, body=b'{"error":{"message":"not found"}}')

    async def _chat(self, request: web.BaseRequest) -> web.StreamResponse:
        self.served += 1
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.Response(status=400, body=b'{"error":{"message":"bad json"}}')
        if not isinstance(payload, dict) or not payload.get("stream"):
            return web.Response(body=self.bodies.completion, headers=JSON_HEADERS)
        options = payload.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        for event in self.bodies.sse_events:
            await response.write(event)
        if usage:
            await response.write(self.bodies.sse_usage_event)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def serve(sock: socket.socket) -> None:
    """Serve on an already-bound socket until SIGTERM or SIGINT."""
    upstream = Upstream()
    server = web.Server(upstream.handle, access_log=None)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=4096)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def bind(host: str, port: int) -> socket.socket:
    """Bind a listening socket that sibling worker processes may share."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.set_inheritable(True)
    return sock


def main() -> None:
    """Parse arguments, fork workers, serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    sock = bind(args.host, args.port)
    children: list[int] = []
    for _ in range(max(0, args.workers - 1)):
        pid = os.fork()
        if pid == 0:
            uvloop.run(serve(sock))
            os._exit(0)
        children.append(pid)
    try:
        uvloop.run(serve(sock))
    finally:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        for pid in children:
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
