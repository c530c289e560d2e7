"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: the Anthropic front door.

An Anthropic Messages request (Anthropic SDKs, tools built on them) is translated into an
OpenAI chat request and takes the same path as ``/v1/chat/completions``: the same keys,
limits, budgets, guardrails, routing and billing, to any upstream (vLLM, OpenAI, Azure, or
Anthropic itself). The answer is translated back: a message object, or Anthropic's stream of
events (``message_start`` ... ``message_stop``); errors are Anthropic error objects, in the
body or, after the stream began, as an ``error`` event. The key may come as ``x-api-key`` (as
Anthropic's SDKs send it) or ``Authorization: Bearer``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson
from aiohttp import web

from fleetgate.api.completions import serve
from fleetgate.api.messages.errors import fleetgate_error_to_anthropic
from fleetgate.api.messages.request import anthropic_request_to_openai
from fleetgate.api.messages.response import openai_response_to_anthropic
from fleetgate.api.messages.stream import OpenAIToAnthropicStream
from fleetgate.api.state import GATEWAY
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint
from fleetgate.errors import FleetgateError
from fleetgate.http.body import read_json
from fleetgate.sse import encode_sse
from fleetgate.tokens import estimate_prompt_tokens

__all__ = ["AnthropicWire", "count_tokens", "messages"]


class _AnthropicStream:
    """`fleetgate.contract.request.StreamEncoder` writing Anthropic's streaming events."""

    def __init__(self, model: str) -> None:
        self._stream = OpenAIToAnthropicStream(model, message_id="msg_" + os.urandom(12).hex())

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        return b"".join(encode_sse(event, data) for event, data in self._stream.feed(chunk))

    def end(self, usage: dict[str, Any] | None) -> bytes:
        head = self.chunk(usage) if usage is not None else b""
        return head + b"".join(encode_sse(event, data) for event, data in self._stream.finish())

    def error(self, error: FleetgateError) -> bytes:
        return encode_sse("error", fleetgate_error_to_anthropic(error)[1])


class AnthropicWire:
    """`fleetgate.contract.request.ResponseWire` of the front door: answers as Anthropic's
    API does."""

    def __init__(self, model: str) -> None:
        self.model = model  # the name the client asked for, echoed back

    def json(self, response: dict[str, Any]) -> bytes:
        return orjson.dumps(openai_response_to_anthropic(response, model=self.model))

    def stream(self) -> _AnthropicStream:
        return _AnthropicStream(self.model)


def _anthropic_error(exc: FleetgateError) -> web.Response:
    status, body = fleetgate_error_to_anthropic(exc)
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=exc.headers
    )


def _principal(request: web.Request) -> Principal:
    gw = request.app[GATEWAY]
    key = request.headers.get("x-api-key")
    if key is None:
        key = gw.core.auth.key_of(request.headers)
    return gw.core.auth.authenticate(key.strip())


async def messages(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = request.app[GATEWAY]
    try:
        principal = _principal(request)
        raw = await read_json(request, gw.max_request_bytes, gw.body_timeout_s)
        body = anthropic_request_to_openai(raw)
        wire = AnthropicWire(body["model"])
        return await serve(request, gw, Endpoint.CHAT, principal, body, started, wire)
    except FleetgateError as exc:
        return _anthropic_error(exc)


async def count_tokens(request: web.Request) -> web.Response:
    """``{"input_tokens": N}``: the gateway's estimate (the one limits reserve against)."""
    gw = request.app[GATEWAY]
    try:
        principal = _principal(request)
        raw = await read_json(request, gw.max_request_bytes, gw.body_timeout_s)
        if isinstance(raw, dict) and "max_tokens" not in raw:
            raw = {**raw, "max_tokens": 1}  # not part of a count request
        body = anthropic_request_to_openai(raw)
        gw.check_model(principal, body["model"])
    except FleetgateError as exc:
        return _anthropic_error(exc)
    return web.Response(
        body=orjson.dumps({"input_tokens": estimate_prompt_tokens(body)}),
        content_type="application/json",
    )
