"""OpenAI APIs the gateway does not serve answer a 404 that says so (`api/unsupported.py`),
which the OpenAI SDK raises as ``NotFoundError`` without retrying; served routes are intact."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import AUTH, MASTER, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

UNSUPPORTED = [
    ("POST", "/v1/moderations", "moderations"),
    ("POST", "/v1/images/generations", "images"),
    ("POST", "/v1/images/edits", "images"),
    ("GET", "/v1/vector_stores", "vector stores"),
    ("POST", "/v1/vector_stores/vs_1/files", "vector stores"),
    ("POST", "/v1/fine_tuning/jobs", "fine-tuning"),
    ("POST", "/v1/conversations", "conversations"),
    ("GET", "/v1/conversations/conv_1/items", "conversations"),
    ("POST", "/v1/audio/translations", "audio translations"),
    ("POST", "/v1/assistants", "Assistants"),
    ("POST", "/v1/threads/t_1/runs", "Assistants"),
    ("POST", "/v1/uploads", "uploads"),
    ("POST", "/v1/realtime/client_secrets", "Realtime"),
    ("GET", "/v1/chat/completions/chatcmpl-1", "stored chat completions"),
    ("POST", "/v1/responses/resp_1/cancel", "this part of the OpenAI Responses API"),
]


@pytest.mark.parametrize(("method", "path", "named"), UNSUPPORTED)
async def test_an_unsupported_openai_api_says_so(
    gateway: GatewayFactory, upstream: FakeUpstream, method: str, path: str, named: str
) -> None:
    client = await gateway(one_alias(upstream))
    resp = await client.request(method, path, json={}, headers=AUTH)
    assert resp.status == 404
    error = (await resp.json())["error"]
    assert error["code"] == "unsupported_endpoint" and error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"{method} {path}: ")
    assert named in error["message"] and "not supported by this gateway" in error["message"]


async def test_a_family_switched_off_names_its_switch(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway({**one_alias(upstream), "batches": {"enabled": False}})
    resp = await client.post("/v1/batches", json={}, headers=AUTH)
    error = (await resp.json())["error"]
    assert resp.status == 404 and error["code"] == "unsupported_endpoint"
    assert "turned off in this gateway's config (batches.enabled)" in error["message"]


async def test_served_routes_and_their_405_are_untouched(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    assert (await client.post("/v1/chat/completions", json=body, headers=AUTH)).status == 200
    assert (await client.get("/v1/models", headers=AUTH)).status == 200
    assert (await client.get("/v1/files", headers=AUTH)).status == 200
    resp = await client.get("/v1/chat/completions", headers=AUTH)
    assert resp.status == 405 and "POST" in resp.headers["Allow"]
    resp = await client.get("/v1/nothing-here", headers=AUTH)
    error = (await resp.json())["error"]
    assert resp.status == 404 and error["code"] == "unsupported_endpoint"
    assert "GET /v1/nothing-here is not an endpoint this gateway serves" in error["message"]


async def test_the_openai_sdk_gets_a_not_found_error_and_does_not_retry(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    seen: list[str] = []

    async def count(request: object) -> None:
        seen.append(str(getattr(request, "url", "")))

    http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [count]})
    sdk = openai.AsyncOpenAI(api_key=MASTER, base_url=str(client.make_url("/v1")), http_client=http)
    try:
        with pytest.raises(openai.NotFoundError) as raised:
            await sdk.moderations.create(input="hello")
    finally:
        await sdk.close()
    assert raised.value.code == "unsupported_endpoint"
    assert "moderations" in raised.value.message
    assert len(seen) == 1  # a 404 is final; a 501 would have been retried twice
