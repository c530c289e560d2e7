"""A stage's prepared answer (``GatewayRequest.answer``, a response cache hit) served like a
fresh one: as JSON, or as the SSE chunks a stream gets, through the request's response or
stream filters (the output checks) and its wire format (``/v1/messages`` included)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import orjson
from aiohttp import web

from fleetgate.api.capture import response_text
from fleetgate.api.stream_filters import OpenAIStreamEncoder, finish_filters, run_filters
from fleetgate.contract.flow import end_reply
from fleetgate.contract.request import GatewayRequest, StreamEncoder
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["answer_chunks", "replay_answer"]

_PIECE = re.compile(r"\S+\s*|\s+")
_WORDS_PER_CHUNK = 4


def answer_chunks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the stream of chunks an upstream would have sent (without usage)."""
    head = {"id": answer.get("id"), "object": "chat.completion.chunk",
            "created": answer.get("created"), "model": answer.get("model")}  # fmt: skip
    choice = (answer.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    text = message.get("content") or ""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    pieces = _PIECE.findall(text)
    for i in range(0, len(pieces), _WORDS_PER_CHUNK):
        chunks.append(chunk({"content": "".join(pieces[i : i + _WORDS_PER_CHUNK])}))
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    return chunks


def _headers(req: GatewayRequest) -> dict[str, str]:
    return {
        **req.response_headers,
        "x-request-id": req.request_id,
        "x-fleetgate-deployment": req.outcome.deployment or "",
        "x-fleetgate-overhead-ms": f"{req.outcome.overhead_s * 1000:.3f}",
    }


async def replay_answer(
    request: web.Request | None, req: GatewayRequest, metrics: GatewayMetrics
) -> web.StreamResponse:
    """Serve ``req.answer``; the outcome gets its usage, finish reason and timings."""
    assert req.answer is not None
    out = req.outcome
    data = orjson.loads(orjson.dumps(req.answer))  # filters may change it in place
    out.take_usage(data.get("usage"))
    out.overhead_s = time.perf_counter() - req.started
    if req.stream and request is not None:
        return await _stream(request, req, data, metrics)
    for f in req.response_filters:
        data = await f.apply(data)
    body = req.wire.json(data) if req.wire is not None else orjson.dumps(data)
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        out.finish_reason = choices[0].get("finish_reason")
    if req.capture_response:
        out.response_text = response_text(data)
    now = time.perf_counter()
    out.first_token_at = out.last_token_at = now
    return web.Response(body=body, content_type="application/json", headers=_headers(req))


class _Replay:
    """The chunks of a prepared answer through the stream filters to the client."""

    def __init__(self, resp: web.StreamResponse, req: GatewayRequest) -> None:
        self.resp = resp
        self.req = req
        self.out = req.outcome
        self.filters = req.stream_filters
        self.encoder: StreamEncoder = (
            req.wire.stream() if req.wire is not None else OpenAIStreamEncoder(req.want_usage)
        )
        self.texts: list[str] = []

    async def emit(self, chunks: list[dict[str, Any]]) -> None:
        out = self.out
        for chunk in chunks:
            now = time.perf_counter()
            if out.first_token_at is None:
                out.first_token_at = now
            out.last_token_at = now
            out.relayed += 1
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict):
                    continue
                if choice.get("finish_reason"):
                    out.finish_reason = str(choice["finish_reason"])
                delta = choice.get("delta")
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    self.texts.append(delta["content"])
            await self.resp.write(self.encoder.chunk(chunk))

    async def run(self, data: dict[str, Any]) -> None:
        filters = self.filters
        for chunk in answer_chunks(data):
            sent, stopped = await run_filters(filters, [chunk])
            await self.emit(sent)
            if stopped:
                break
        else:
            await finish_filters(filters, self.emit)
        usage = {k: v for k, v in data.items() if k != "choices"}
        usage.update(object="chat.completion.chunk", choices=[])
        if self.req.at_end is not None:  # a full slot's settle, before the end leaves
            await end_reply(self.req)
        await self.resp.write(self.encoder.end(usage))
        await self.resp.write_eof()


async def _stream(
    request: web.Request, req: GatewayRequest, data: dict[str, Any], metrics: GatewayMetrics
) -> web.StreamResponse:
    out = req.outcome
    headers = {**_headers(req), "Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    resp = web.StreamResponse(status=200, headers=headers)
    replay = _Replay(resp, req)
    try:
        await resp.prepare(request)
        await replay.run(data)
    except asyncio.CancelledError:
        out.status, out.error_type = 499, "client_disconnected"
        metrics.client_disconnects.labels(out.alias).inc()
        raise
    except ConnectionError:
        out.status, out.error_type = 499, "client_disconnected"
        metrics.client_disconnects.labels(out.alias).inc()
    if req.capture_response and out.response_text is None:
        out.response_text = "".join(replay.texts)
    return resp
