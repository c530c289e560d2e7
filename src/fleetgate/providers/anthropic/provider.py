"""Anthropic Messages upstreams, spoken to in OpenAI's format on our side.

Requests are translated to ``POST /v1/messages`` (``request``); responses and the streaming
event sequence (message_start, content_block_*, message_delta, message_stop) are translated
back into chat.completion objects (``response``) and chunks (``stream``); error answers become
fleetgate errors (``errors``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from fleetgate.config.schema import DeploymentConfig
from fleetgate.contract.request import Endpoint
from fleetgate.errors import FleetgateError, InvalidRequest, UpstreamBadResponse
from fleetgate.providers.anthropic.errors import anthropic_error
from fleetgate.providers.anthropic.request import openai_chat_to_anthropic
from fleetgate.providers.anthropic.response import anthropic_to_openai_response
from fleetgate.providers.anthropic.stream import AnthropicStreamTranslator
from fleetgate.providers.anthropic.wire import anthropic_headers, anthropic_messages_url
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.providers.connections import PooledResponse
from fleetgate.providers.transport import HttpClient, translated_stream
from fleetgate.sse import SSEParser, encode_sse
from fleetgate.telemetry.tracing import TRACE_HEADERS

# After [DONE] only the chunked-encoding terminator is left: wait this long for it.

__all__ = ["AnthropicProvider"]


def _trace_only(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The W3C trace context of the attempt, the only gateway header a hosted API is sent."""
    out = {k: v for k, v in headers.items() if k in TRACE_HEADERS}
    return out or None


def _error(status: int, body: bytes, headers: Mapping[str, str]) -> FleetgateError:
    parsed: Any
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = body.decode("utf-8", "replace")[:200]
    retry = headers.get("retry-after")
    try:
        retry_after = float(retry) if retry is not None else None
    except ValueError:
        retry_after = None
    return anthropic_error(status, parsed, retry_after=retry_after)


class AnthropicProvider:
    def __init__(self, config: DeploymentConfig, http: HttpClient) -> None:
        self.config = config
        self._http = http
        self._url = anthropic_messages_url(config.api_base)
        self._headers = {
            "Content-Type": "application/json",
            **anthropic_headers(config.api_key or ""),
            **config.extra_headers,
        }

    async def probe(self) -> bool:
        # Anthropic has no free health route; a models listing costs nothing.
        url = self._url.removesuffix("/messages") + "/models"
        return await self._http.get_ok(url, self._headers, 2.0)

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        if call.endpoint is not Endpoint.CHAT:
            raise InvalidRequest(
                f"Anthropic deployments serve chat completions only, not /{call.endpoint.value}."
            )
        model = str(call.body.get("model", self.config.model))
        payload = openai_chat_to_anthropic(call.body, self.config.model)
        payload["stream"] = call.stream
        data = orjson.dumps(payload)
        if not call.stream:
            _, body = await self._post(data, call)
            try:
                message = orjson.loads(body or b"")
            except orjson.JSONDecodeError:
                raise UpstreamBadResponse("Anthropic returned a body that is not JSON") from None
            out = anthropic_to_openai_response(message, model)
            return UpstreamResponse(body=orjson.dumps(out))
        options = call.body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        translator = AnthropicStreamTranslator(model, include_usage, created=int(time.time()))
        return await self._open_stream(data, call, translator)

    async def _post(self, data: bytes, call: UpstreamCall) -> tuple[PooledResponse, bytes | None]:
        """POST ``data`` with ``call``'s timeouts and trace headers, streamed when the call is
        (then the body is the caller's to read); error statuses as Anthropic words them."""
        return await self._http.post(
            self._url, data, self._headers, call.timeouts, stream=call.stream, on_error=_error,
            extra_headers=_trace_only(call.headers),
        )  # fmt: skip

    async def _open_stream(
        self, data: bytes, call: UpstreamCall, translator: AnthropicStreamTranslator
    ) -> UpstreamResponse:
        return await translated_stream(
            lambda: self._post(data, call),
            lambda resp: _translate(resp, translator),
            call.timeouts.first_token,
            self._url,
            "Anthropic stream ended before any event",
        )


async def _translate(
    resp: PooledResponse, translator: AnthropicStreamTranslator
) -> AsyncIterator[list[bytes]]:
    """Anthropic SSE bytes → OpenAI chunk events (a list per read), ending with ``[DONE]``."""
    parser = SSEParser()
    async for raw in resp.iter_chunks():
        batch: list[bytes] = []
        for event, text in parser.feed(raw):
            if not text:
                continue
            try:
                payload = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise UpstreamBadResponse("Anthropic sent an event that is not JSON") from None
            if not isinstance(payload, dict):
                continue
            for chunk in translator.feed(event or str(payload.get("type", "")), payload):
                batch.append(encode_sse(None, chunk))
        if batch:
            yield batch
    if not translator.finished:
        raise UpstreamBadResponse("Anthropic stream ended before message_stop")
    yield [b"data: [DONE]\n\n"]
