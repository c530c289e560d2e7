"""`NativeResponses`: one attempt sent to an upstream's own ``/v1/responses``.

Used by `fleetgate.providers.openai.OpenAIProvider` for a deployment with
``responses_api: native`` when the request came in on ``/v1/responses`` (`UpstreamCall.responses`
is set); every other request to it is an ordinary chat completion. The request is built from
the chat body the stages left (`request.chat_to_responses`), the answer is translated back
into a chat completion or chat chunks (`response`, `stream`), so limits, checks, routing,
retries and spend treat it like any chat answer. As for chat streams, `send` returns once the
first event arrived: a failure before it can still be retried on another deployment.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping

import orjson

from fleetgate.errors import FleetgateError, UpstreamBadResponse
from fleetgate.providers.base import UpstreamCall, UpstreamResponse, json_object
from fleetgate.providers.connections import PooledResponse
from fleetgate.providers.responses.request import chat_to_responses
from fleetgate.providers.responses.response import responses_to_chat
from fleetgate.providers.responses.stream import ResponsesStreamTranslator
from fleetgate.providers.transport import HttpClient, translated_stream
from fleetgate.sse import SSEParser, encode_sse

__all__ = ["NativeResponses"]

# After the stream's last event only the chunked-encoding terminator is left.


class NativeResponses:
    """Speaks ``POST {api_base}/responses`` for one deployment."""

    def __init__(self, url: str, headers: Mapping[str, str], http: HttpClient) -> None:
        self.url = url
        self._headers = headers
        self._http = http

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        model = str(call.body.get("model") or "")
        payload = orjson.dumps(chat_to_responses(call.body, call.responses, call.stream))
        if not call.stream:
            _, body = await self._http.post(
                self.url, payload, self._headers, call.timeouts, stream=False,
                extra_headers=call.headers,
            )  # fmt: skip
            data = json_object(body or b"")
            return UpstreamResponse(body=orjson.dumps(responses_to_chat(data, model)))
        return await self._open_stream(
            payload, call, ResponsesStreamTranslator(model, int(time.time()))
        )

    async def _open_stream(
        self, payload: bytes, call: UpstreamCall, translator: ResponsesStreamTranslator
    ) -> UpstreamResponse:
        return await translated_stream(
            lambda: self._http.post(
                self.url, payload, self._headers, call.timeouts, stream=True,
                extra_headers=call.headers,
            ),
            lambda resp: _translate(resp, translator),
            call.timeouts.first_token,
            self.url,
            "The upstream stream ended before any event.",
        )  # fmt: skip


async def _translate(
    resp: PooledResponse, translator: ResponsesStreamTranslator
) -> AsyncIterator[list[bytes]]:
    """Responses SSE bytes -> chat chunk events (a list per read), ending with ``[DONE]``
    after the response's last event (``response.completed`` or ``response.incomplete``)."""
    parser = SSEParser()
    async for raw in resp.iter_chunks():
        batch: list[bytes] = []
        for _, text in parser.feed(raw):
            if not text or text == "[DONE]":
                continue
            try:
                event = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise UpstreamBadResponse("The upstream sent an event that is not JSON.") from None
            if not isinstance(event, dict):
                continue
            try:
                chunks = translator.feed(event)
            except FleetgateError:  # the response failed: what came before it still goes out
                if batch:
                    yield batch
                raise
            batch.extend(encode_sse(None, chunk) for chunk in chunks)
        if translator.finished:  # the rest is the chunked terminator: the closer drains it
            yield [*batch, b"data: [DONE]\n\n"]
            return
        if batch:
            yield batch
    raise UpstreamBadResponse("The upstream's Responses stream ended before it completed.")
