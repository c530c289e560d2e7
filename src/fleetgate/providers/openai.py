"""OpenAI-compatible upstreams: vLLM, SGLang, llama.cpp server, OpenAI itself, and Azure OpenAI.

Bodies and stream events are passed through as bytes; nothing is re-encoded here.
"""

from __future__ import annotations

import asyncio

import orjson

from fleetgate.config.schema import DeploymentConfig
from fleetgate.contract.request import Endpoint
from fleetgate.errors import UpstreamBadResponse
from fleetgate.providers.azure_openai import azure_url
from fleetgate.providers.base import RoutedEndpoint, UpstreamCall, UpstreamResponse
from fleetgate.providers.connections import PooledResponse
from fleetgate.providers.responses import NativeResponses
from fleetgate.providers.transport import (
    HttpClient,
    raise_upstream_error,
    read_errors,
    streamed_response,
)
from fleetgate.sse import SSEBatches

# After [DONE] only the chunked-encoding terminator is left: wait this long for it.

__all__ = ["AzureOpenAIProvider", "OpenAIProvider"]

_SSE_STARTS = (b"data:", b":", b"event:", b"id:", b"retry:")


class OpenAIProvider:
    """Any server that speaks OpenAI's ``/v1/chat/completions`` (vLLM, SGLang, llama.cpp...)."""

    def __init__(self, config: DeploymentConfig, http: HttpClient) -> None:
        self.config = config
        self._http = http
        self._headers = {"Content-Type": "application/json", **config.extra_headers}
        if config.api_key:
            self._headers.update(self._auth_headers(config.api_key))
        self._chat_url = self.url(Endpoint.CHAT)
        self._native: NativeResponses | None = None
        if config.responses_api == "native":
            self._native = NativeResponses(f"{config.api_base}/responses", self._headers, http)

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def url(self, endpoint: RoutedEndpoint) -> str:
        return f"{self.config.api_base}/{endpoint.value}"

    def probe_url(self) -> str:
        return f"{self.config.api_base}{self.config.health_path}"

    async def probe(self) -> bool:
        timeout = self.config.timeouts.connect if self.config.timeouts else 2.0
        return await self._http.get_ok(self.probe_url(), self._headers, timeout)

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        if call.responses is not None and self._native is not None:
            return await self._native.send(call)
        # the chat URL is made once (an enum's value costs a call to read)
        url = self._chat_url if call.endpoint is Endpoint.CHAT else self.url(call.endpoint)
        payload = orjson.dumps(call.body)
        if not call.stream:
            resp, body = await self._http.post(
                url, payload, self._headers, call.timeouts, stream=False,
                extra_headers=call.headers,
            )  # fmt: skip
            out = UpstreamResponse(status=resp.status, body=body)
            out.json()  # garbage in a 200 is an upstream failure, and retryable
            return out
        return await self._open_stream(url, payload, call)

    async def _open_stream(self, url: str, payload: bytes, call: UpstreamCall) -> UpstreamResponse:
        resp: PooledResponse | None = None
        try:
            async with asyncio.timeout(call.timeouts.first_token):
                resp, _ = await self._http.post(
                    url, payload, self._headers, call.timeouts, stream=True,
                    extra_headers=call.headers,
                )  # fmt: skip
                batches = SSEBatches(resp.reader(), read_errors(url))
                try:
                    first_batch = await anext(batches)  # never empty
                except StopAsyncIteration:
                    raise UpstreamBadResponse(
                        "The upstream stream ended before any event.",
                        detail=f"{url}: stream ended before any event",
                    ) from None
        except BaseException as exc:
            raise_upstream_error(exc, resp, url)
        if not first_batch[0].startswith(_SSE_STARTS):
            resp.close()
            raise UpstreamBadResponse(
                "The upstream stream is not server-sent events.",
                detail=f"{url}: stream is not server-sent events",
            )
        return streamed_response(resp, first_batch, batches, url, status=resp.status)


class AzureOpenAIProvider(OpenAIProvider):
    """Azure OpenAI: deployment paths, ``api-version`` query, ``api-key`` header."""

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"api-key": api_key}

    def url(self, endpoint: RoutedEndpoint) -> str:
        deployment = self.config.azure_deployment or self.config.model
        version = self.config.api_version or ""  # the config requires one for azure
        return azure_url(self.config.api_base, deployment, endpoint.value, version)

    def probe_url(self) -> str:
        base = self.config.api_base.removesuffix("/openai")
        return f"{base}/openai/models?api-version={self.config.api_version}"
