"""A programmable OpenAI-compatible upstream for in-process tests.

Queue what the next requests should get; anything not queued gets a normal answer::

    async with FakeUpstream() as up:
        up.queue(Status(500), Status(429, retry_after=1))
        ...  # first two requests fail, the third succeeds
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class Status:
    status: int
    retry_after: float | None = None
    message: str = "upstream error"


@dataclass
class Garbage:
    body: bytes = b"<html>not json</html>"


@dataclass
class Hang:
    seconds: float = 30.0


@dataclass
class Reset:
    pass


@dataclass
class Reply:
    content: str = "Hello there."
    tool_calls: list[dict[str, Any]] | None = None
    chunk_delay: float = 0.0
    fail_after_chunks: int | None = None
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None  # the usage object to report (default: counted words)


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeUpstream:
    name: str = "fake"
    script: deque[Any] = field(default_factory=deque)
    seen: list[Seen] = field(default_factory=list)
    cancelled: int = 0
    probes: int = 0
    healthy: bool = True
    delay_s: float = 0.0  # before every chat answer (a slow engine)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *behaviours: Any) -> None:
        self.script.extend(behaviours)

    async def __aenter__(self) -> FakeUpstream:
        app = web.Application(client_max_size=64 << 20)  # long-input tests send 1 MiB+
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock)
        await site.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        self.probes += 1
        if not self.healthy:
            return web.Response(status=503)
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append(Seen(request.path, body, dict(request.headers)))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": [0.1, 0.2, float(i)]}
            for i in range(len(inputs))
        ]
        usage = {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(Seen(request.path, body, dict(request.headers)))
        behaviour = self.script.popleft() if self.script else Reply()
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            return await self._act(request, body, behaviour)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _act(self, request: web.Request, body: dict[str, Any], b: Any) -> web.StreamResponse:
        if isinstance(b, Status):
            headers = {"Retry-After": str(b.retry_after)} if b.retry_after is not None else {}
            err = {"error": {"message": b.message, "type": "upstream", "code": None}}
            return web.json_response(err, status=b.status, headers=headers)
        if isinstance(b, Garbage):
            return web.Response(body=b.body, content_type="text/html")
        if isinstance(b, Hang):
            await asyncio.sleep(b.seconds)
            return web.Response(status=504)
        if isinstance(b, Reset):
            assert request.transport is not None
            request.transport.abort()
            await asyncio.sleep(0.05)
            return web.Response(status=500)
        assert isinstance(b, Reply)
        if body.get("stream"):
            return await self._stream(request, body, b)
        message: dict[str, Any] = {"role": "assistant", "content": b.content}
        if b.tool_calls:
            message = {"role": "assistant", "content": None, "tool_calls": b.tool_calls}
        return web.json_response(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 1,
                "model": body.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": b.finish_reason}],
                "usage": b.usage
                or {
                    "prompt_tokens": 10,
                    "completion_tokens": len(b.content.split()),
                    "total_tokens": 10 + len(b.content.split()),
                },
                "echo_request": body,
            }
        )

    async def _stream(
        self, request: web.Request, body: dict[str, Any], b: Reply
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        words = b.content.split(" ")
        include_usage = (body.get("stream_options") or {}).get("include_usage")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if include_usage:
                data["usage"] = None
            return b"data: " + orjson.dumps(data) + b"\n\n"

        await resp.write(chunk({"role": "assistant", "content": ""}))
        if b.tool_calls:  # streamed as OpenAI does: the head, then the arguments in pieces
            words = []
            for i, call in enumerate(b.tool_calls):
                fn = call["function"]
                head = {"index": i, "id": call["id"], "type": "function",
                        "function": {"name": fn["name"], "arguments": ""}}  # fmt: skip
                await resp.write(chunk({"tool_calls": [head]}))
                args, half = fn["arguments"], len(fn["arguments"]) // 2
                for piece in (args[:half], args[half:]):
                    await resp.write(
                        chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                    )
        for i, word in enumerate(words):
            if b.fail_after_chunks is not None and i >= b.fail_after_chunks:
                assert request.transport is not None
                request.transport.abort()
                return resp
            if b.chunk_delay:
                await asyncio.sleep(b.chunk_delay)
            await resp.write(chunk({"content": word if i == 0 else " " + word}))
        await resp.write(chunk({}, b.finish_reason))
        if include_usage:
            usage = b.usage or {
                "prompt_tokens": 10,
                "completion_tokens": len(words),
                "total_tokens": 10 + len(words),
            }
            data = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": [],
                "usage": usage,
            }
            await resp.write(b"data: " + orjson.dumps(data) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
