"""A programmable upstream that speaks OpenAI's Responses API (``POST /v1/responses``) for
in-process tests of native Responses deployments; it also serves ``/v1/chat/completions``
(counted in ``chat_requests``) so a test can tell which API a request used."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class NativeReply:
    text: str = "Hello from the Responses API."
    call: tuple[str, str, str] | None = None  # (call_id, name, arguments): a function call
    usage: dict[str, Any] | None = None  # default: words counted
    chunk_delay: float = 0.0
    fail_after: int | None = None  # streamed: response.failed after this many deltas
    status: str = "completed"
    incomplete_reason: str | None = None
    http_status: int = 200


@dataclass
class FakeResponses:
    script: deque[NativeReply] = field(default_factory=deque)
    received: list[dict[str, Any]] = field(default_factory=list)
    chat_requests: int = 0
    cancelled: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: NativeReply) -> None:
        self.script.extend(replies)

    async def __aenter__(self) -> FakeResponses:
        app = web.Application()
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "up", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        self.chat_requests += 1
        return web.json_response({"error": {"message": "use /v1/responses"}}, status=400)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append(body)
        reply = self.script.popleft() if self.script else NativeReply()
        if reply.http_status != 200:
            error = {"message": f"upstream says {reply.http_status}", "type": "server_error"}
            return web.json_response({"error": error}, status=reply.http_status)
        try:
            if body.get("stream"):
                return await self._stream(request, body, reply)
            return web.json_response(_response(body, reply, reply.status, _output(reply)))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: NativeReply
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        seq = 0

        async def send(kind: str, **fields: Any) -> None:
            nonlocal seq
            data = {"type": kind, "sequence_number": seq, **fields}
            seq += 1
            await resp.write(f"event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n")

        head = _response(body, reply, "in_progress", [])
        await send("response.created", response=head)
        await send("response.in_progress", response=head)
        item = _output(reply)[0]
        pieces = _pieces(reply.call[2] if reply.call else reply.text)
        if reply.call is not None:
            await send("response.output_item.added", output_index=0,
                       item={**item, "arguments": "", "status": "in_progress"})  # fmt: skip
        else:
            await send("response.output_item.added", output_index=0,
                       item={**item, "content": [], "status": "in_progress"})  # fmt: skip
        for i, piece in enumerate(pieces):
            if reply.fail_after is not None and i == reply.fail_after:
                failed = _response(body, reply, "failed", [])
                failed["error"] = {"code": "server_error", "message": "the model crashed"}
                await send("response.failed", response=failed)
                return resp
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            if reply.call is not None:
                await send("response.function_call_arguments.delta", item_id=item["id"],
                           output_index=0, delta=piece)  # fmt: skip
            else:
                await send("response.output_text.delta", item_id=item["id"], output_index=0,
                           content_index=0, delta=piece, logprobs=[])  # fmt: skip
        await send("response.output_item.done", output_index=0, item=item)
        final = _response(body, reply, reply.status, [item])
        await send(f"response.{reply.status}", response=final)
        await resp.write_eof()
        return resp


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _output(reply: NativeReply) -> list[dict[str, Any]]:
    if reply.call is not None:
        call_id, name, arguments = reply.call
        return [{"id": "fc_up_1", "type": "function_call", "status": "completed",
                 "call_id": call_id, "name": name, "arguments": arguments}]  # fmt: skip
    part = {"type": "output_text", "text": reply.text, "annotations": []}
    return [{"id": "msg_up_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [part]}]  # fmt: skip


def _response(
    body: dict[str, Any], reply: NativeReply, status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    usage = reply.usage or {
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": len(_pieces(reply.text)), "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10 + len(_pieces(reply.text)),
    }  # fmt: skip
    incomplete = {"reason": reply.incomplete_reason} if status == "incomplete" else None
    return {
        "id": "resp_upstream_1", "object": "response", "created_at": 1, "status": status,
        "model": body.get("model"), "output": output, "error": None,
        "incomplete_details": incomplete,
        "usage": usage if status in ("completed", "incomplete") else None,
    }  # fmt: skip
