"""A local fake of Anthropic's Messages API (``POST /v1/messages``) for tests.

It checks what the real API checks first (the key in ``x-api-key`` or as a bearer token,
``anthropic-version``, the request
shape: roles, block types, tool results answering the previous turn's tool calls) and answers
either a canned reply or, when none is queued, an echo of the last user text. A canned message
is served as JSON, or for ``"stream": true`` as the event sequence of Anthropic's published
streaming examples: ``message_start``, ``content_block_start``, a ``ping`` after the first block
start, ``content_block_delta``\\* (text in word pieces, tool input as ``input_json_delta``
fragments starting with an empty one, thinking with a closing ``signature_delta``),
``content_block_stop``, ``message_delta`` and ``message_stop``.

Example::

    async with FakeAnthropic(api_key="k") as fake:
        fake.queue_error(529, "overloaded_error", "Overloaded")
        fake.queue_message(tool_use_message("get_weather", {"location": "Paris"}))
        client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="k")
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = [
    "FakeAnthropic",
    "ReceivedRequest",
    "message_events",
    "text_message",
    "thinking_message",
    "tool_use_message",
]

Event = tuple[str, dict[str, Any]]
MODEL = "claude-fake-1"
_IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
_BLOCK_TYPES = {
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
}


def _usage(
    input_tokens: int, output_tokens: int, cache_read: int, cache_creation: int
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output_tokens,
    }


def _message(
    content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any], ident: str
) -> dict[str, Any]:
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def text_message(
    text: str,
    *,
    stop_reason: str = "end_turn",
    stop_sequence: str | None = None,
    input_tokens: int = 12,
    output_tokens: int = 7,
    cache_read: int = 0,
    cache_creation: int = 0,
    ident: str = "msg_01FakeText",
) -> dict[str, Any]:
    """An Anthropic message with one text block."""
    usage = _usage(input_tokens, output_tokens, cache_read, cache_creation)
    msg = _message([{"type": "text", "text": text}], stop_reason, usage, ident)
    msg["stop_sequence"] = stop_sequence
    return msg


def tool_use_message(
    name: str,
    tool_input: dict[str, Any],
    *,
    text: str | None = None,
    tool_id: str = "toolu_01FakeToolUse",
    input_tokens: int = 40,
    output_tokens: int = 30,
    ident: str = "msg_01FakeTool",
) -> dict[str, Any]:
    """An Anthropic message that calls one tool (optionally after some text)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
    return _message(content, "tool_use", _usage(input_tokens, output_tokens, 0, 0), ident)


def thinking_message(thinking: str, text: str, *, ident: str = "msg_01FakeThink") -> dict[str, Any]:
    """An Anthropic message with a thinking block followed by a text block."""
    content = [
        {"type": "thinking", "thinking": thinking, "signature": "EqQBCgIYAhIMfakeSignature"},
        {"type": "text", "text": text},
    ]
    return _message(content, "end_turn", _usage(20, 50, 0, 0), ident)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _words(text: str) -> list[str]:
    out: list[str] = []
    for word in text.split(" "):
        out.append(word if not out else " " + word)
    return [w for w in out if w] or [""]


def _block_events(index: int, block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kind = block["type"]
    if kind == "text":
        deltas = [{"type": "text_delta", "text": w} for w in _words(block["text"])]
        return {"type": "text", "text": ""}, deltas
    if kind == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], 16)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
        return {"type": "thinking", "thinking": ""}, deltas
    if kind == "tool_use":
        raw = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(raw, 7)]]
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        return start, deltas
    raise ValueError(f"fake cannot stream a {kind!r} block")


def message_events(message: dict[str, Any]) -> list[Event]:
    """The SSE events Anthropic sends for ``message`` when streaming, in order."""
    usage = message["usage"]
    start_usage = {**usage, "output_tokens": 1}
    head = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    events: list[Event] = [("message_start", {"type": "message_start", "message": head})]
    for index, block in enumerate(message["content"]):
        start, deltas = _block_events(index, block)
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        if index == 0:
            events.append(("ping", {"type": "ping"}))
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message.get("stop_sequence")}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": stop,
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


@dataclass
class _Error:
    status: int
    kind: str
    message: str
    retry_after: int | None = None


@dataclass
class _Reply:
    message: dict[str, Any] | None = None
    events: list[Event] | None = None
    stream_error: tuple[str, str] | None = None


@dataclass
class ReceivedRequest:
    """One request the fake received: its headers and parsed JSON body."""

    headers: dict[str, str]
    body: Any


def _error_body(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def validate_request(body: Any) -> str | None:
    """The first thing the real API would refuse in ``body``, as its message, or ``None``."""
    if not isinstance(body, dict):
        return "body: must be an object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (a positive integer)"
    temperature = body.get("temperature")
    if temperature is not None and not 0 <= temperature <= 1:
        return "temperature: must be between 0 and 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return _validate_messages(messages) or _validate_tools(body)


def _validate_messages(messages: list[Any]) -> str | None:
    previous_tool_ids: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i > 0 and messages[i - 1].get("role") == role:
            return 'messages: roles must alternate between "user" and "assistant"'
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{i}.content: must be a string or a non-empty list of blocks"
        problem = _validate_blocks(i, role, blocks, previous_tool_ids)
        if problem:
            return problem
        previous_tool_ids = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return None


def _validate_blocks(i: int, role: str, blocks: list[Any], tool_ids: set[str]) -> str | None:
    seen_other = False
    for j, block in enumerate(blocks):
        where = f"messages.{i}.content.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in _BLOCK_TYPES:
            return f"{where}.type: unknown block type {kind!r}"
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
            return f"{where}: text content blocks must be non-empty"
        if kind == "image":
            source = block.get("source") or {}
            if source.get("type") == "base64" and source.get("media_type") not in _IMAGE_TYPES:
                return f"{where}.source.media_type: unsupported image type"
            if source.get("type") not in ("base64", "url"):
                return f"{where}.source.type: must be 'base64' or 'url'"
        if kind == "tool_use" and (role != "assistant" or not isinstance(block.get("input"), dict)):
            return f"{where}: tool_use blocks belong to assistant turns and need an object input"
        if kind == "tool_result":
            if role != "user" or block.get("tool_use_id") not in tool_ids:
                return f"{where}: tool_result must answer a tool_use of the previous assistant turn"
            if seen_other:
                return f"{where}: tool_result blocks must come before other content"
        else:
            seen_other = True
    return None


def _validate_tools(body: dict[str, Any]) -> str | None:
    for i, tool in enumerate(body.get("tools") or []):
        schema = tool.get("input_schema")
        if (
            not isinstance(tool.get("name"), str)
            or not isinstance(schema, dict)
            or schema.get("type") != "object"
        ):
            return f"tools.{i}: a tool needs a name and an input_schema of type object"
    choice = body.get("tool_choice")
    if choice is not None:
        if choice.get("type") not in ("auto", "any", "tool", "none"):
            return "tool_choice.type: must be auto, any, tool or none"
        if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
            return "tool_choice.name: Field required"
    return None


class FakeAnthropic:
    """An aiohttp server on 127.0.0.1 speaking the Messages API; ``async with`` gives its URL.

    ``received`` lists every request (headers and JSON body) in arrival order.
    """

    def __init__(self, api_key: str = "test-key") -> None:
        self.api_key = api_key
        self.base_url = ""
        self.received: list[ReceivedRequest] = []
        self._queue: deque[_Error | _Reply] = deque()
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count()

    def queue_message(
        self, message: dict[str, Any], *, stream_error: tuple[str, str] | None = None
    ) -> None:
        """Answer the next request with ``message`` (JSON, or its events when streaming).

        ``stream_error`` = ``(type, message)`` makes a streamed answer stop after the first
        content block start with an ``error`` event, as Anthropic does when overloaded mid-way.
        """
        self._queue.append(_Reply(message=message, stream_error=stream_error))

    def queue_events(self, events: list[Event]) -> None:
        """Answer the next (streaming) request with exactly these events."""
        self._queue.append(_Reply(events=events))

    def queue_error(
        self, status: int, kind: str, message: str, *, retry_after: int | None = None
    ) -> None:
        """Answer the next request with an Anthropic error (e.g. 529 ``overloaded_error``)."""
        self._queue.append(_Error(status, kind, message, retry_after))

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _error(
        self, status: int, kind: str, message: str, retry_after: int | None = None
    ) -> web.Response:
        request_id = f"req_fake{next(self._ids):06d}"
        headers = {"request-id": request_id}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        return web.json_response(
            _error_body(kind, message, request_id), status=status, headers=headers
        )

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        self.received.append(ReceivedRequest(dict(request.headers), body))
        if not self._authorized(request):
            return self._error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self._error(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        problem = validate_request(body)
        if problem:
            return self._error(400, "invalid_request_error", problem)
        reply = self._queue.popleft() if self._queue else _Reply(message=self._echo(body))
        if isinstance(reply, _Error):
            return self._error(reply.status, reply.kind, reply.message, reply.retry_after)
        if body.get("stream") is True:
            return await self._stream(request, reply)
        if reply.message is None:
            return self._error(400, "invalid_request_error", "fake: queued events need stream=true")
        return web.json_response(
            reply.message, headers={"request-id": f"req_fake{next(self._ids):06d}"}
        )

    def _authorized(self, request: web.Request) -> bool:
        # The published curl examples send x-api-key; recent SDKs send the key as a bearer token.
        if request.headers.get("x-api-key") == self.api_key:
            return True
        return request.headers.get("authorization") == f"Bearer {self.api_key}"

    def _echo(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]["content"]
        if isinstance(last, list):
            last = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
        return text_message(f"echo: {last}", ident=f"msg_01Echo{next(self._ids):06d}")

    async def _stream(self, request: web.Request, reply: _Reply) -> web.StreamResponse:
        events = reply.events if reply.events is not None else message_events(reply.message or {})
        if reply.stream_error is not None:
            cut = next(i for i, (name, _) in enumerate(events) if name == "content_block_start") + 1
            kind, message = reply.stream_error
            events = [
                *events[:cut],
                ("error", {"type": "error", "error": {"type": kind, "message": message}}),
            ]
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        await response.prepare(request)
        for name, data in events:
            await response.write(_frame(name, data))
        await response.write_eof()
        return response
