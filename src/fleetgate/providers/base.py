"""The provider interface: one call to one upstream deployment, in OpenAI's wire format.

A provider translates an OpenAI-format request into its upstream's format, sends it, and
translates the answer back. Retries, fallbacks, limits and metrics wrap providers; they are
never woven into them (see ``routing/dispatch.py``).

For streams, `Provider.send` returns only once the first SSE event has arrived, so that a
failure before the first token can still be retried elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from fleetgate.config.schema import TimeoutConfig
from fleetgate.contract.request import Endpoint
from fleetgate.errors import UpstreamBadResponse

__all__ = ["Provider", "RoutedEndpoint", "UpstreamCall", "UpstreamResponse", "json_object"]


def json_object(body: bytes) -> dict[str, Any]:
    """An upstream's answer body as a JSON object; `UpstreamBadResponse` when it is not JSON,
    or JSON that is not an object."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise UpstreamBadResponse("upstream returned a body that is not JSON") from None
    if not isinstance(value, dict):
        raise UpstreamBadResponse("upstream returned JSON that is not an object")
    return value


# The endpoints a provider is sent (the audio ones go to the multimodal engines).
RoutedEndpoint = Literal[Endpoint.CHAT, Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS]


@dataclass(slots=True)
class UpstreamCall:
    """One attempt's request. ``body`` is OpenAI-format and already names the upstream model."""

    endpoint: RoutedEndpoint
    body: dict[str, Any]
    stream: bool
    timeouts: TimeoutConfig
    headers: dict[str, str] = field(default_factory=dict)
    # A ``/v1/responses`` request: the client's Responses-only fields (``reasoning``, ...). A
    # deployment with ``responses_api: native`` then sends it to its own ``/v1/responses``;
    # None: an ordinary chat request (and every other provider ignores it).
    responses: dict[str, Any] | None = None


class UpstreamResponse:
    """An upstream's answer, in OpenAI format.

    Non-streaming: ``body`` holds the JSON bytes (``json()`` parses them once).
    Streaming: ``first_batch`` holds the complete SSE events (``b"data: {...}\\n\\n"``) that
    arrived with the first one, ``batches`` yields the rest as lists of complete events, one
    list per upstream read, so a relay can forward what arrived together in one write;
    ``events`` yields every event, the first batch included, one by one.
    ``aclose`` releases the connection; closing before the end aborts the upstream request.
    """

    __slots__ = ("status", "headers", "body", "first_batch", "_events", "_closer", "_json")

    def __init__(
        self,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        first_batch: list[bytes] | None = None,
        batches: AsyncIterator[list[bytes]] | None = None,
        closer: Any = None,
    ) -> None:
        self.status = status
        self.headers = headers or {}
        self.body = body
        self.first_batch = first_batch or []
        self._events = batches
        self._closer = closer
        self._json: dict[str, Any] | None = None

    @property
    def is_stream(self) -> bool:
        return self._events is not None

    def json(self) -> dict[str, Any]:
        if self._json is None:
            if self.body is None:
                raise UpstreamBadResponse("upstream returned no body")
            self._json = json_object(self.body)
        return self._json

    def batches(self) -> AsyncIterator[list[bytes]]:
        if self._events is None:
            raise TypeError("not a streaming response")
        return self._events

    async def events(self) -> AsyncIterator[bytes]:
        for event in self.first_batch:
            yield event
        async for batch in self.batches():
            for event in batch:
                yield event

    async def aclose(self, *, graceful: bool = False) -> None:
        """Release the connection. ``graceful``: the stream ended normally ([DONE] seen), so
        the provider may read the few bytes left to keep the connection alive."""
        closer, self._closer = self._closer, None
        if closer is not None:
            await closer(graceful)


class Provider(Protocol):
    """One upstream deployment. Raises only `fleetgate.errors.UpstreamError` subclasses."""

    async def send(self, call: UpstreamCall) -> UpstreamResponse: ...

    async def probe(self) -> bool:
        """A cheap health check (e.g. ``GET /models``); True when the upstream answers."""
        ...
