"""Azure OpenAI through the gateway: deployment paths, api-version, api-key header."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import AUTH, GatewayFactory


@pytest.fixture
async def azure() -> AsyncIterator[tuple[str, list[web.Request]]]:
    seen: list[web.Request] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(request)
        body = await request.json()
        content = f"n={len(body['messages'])}"
        return web.json_response({
            "id": "x", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        })  # fmt: skip

    app = web.Application()
    app.router.add_post("/openai/deployments/{dep}/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    await runner.cleanup()


async def test_azure_paths_and_headers(
    gateway: GatewayFactory, azure: tuple[str, list[web.Request]]
) -> None:
    base, seen = azure
    cfg: dict[str, Any] = {"models": [{"alias": "gpt", "deployments": [{
        "provider": "azure", "model": "gpt-4o", "azure_deployment": "prod-gpt4o",
        "api_base": base, "api_key": "az-key", "api_version": "2024-10-21"}]}]}  # fmt: skip
    client = await gateway(cfg)
    body = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    assert (await resp.json())["choices"][0]["message"]["content"] == "n=1"
    req = seen[0]
    assert req.path == "/openai/deployments/prod-gpt4o/chat/completions"
    assert req.query["api-version"] == "2024-10-21"
    assert req.headers["api-key"] == "az-key"
    assert "Authorization" not in req.headers


async def test_a_deployment_name_is_quoted_in_the_request_sent(
    gateway: GatewayFactory, azure: tuple[str, list[web.Request]]
) -> None:
    base, seen = azure
    cfg: dict[str, Any] = {"models": [{"alias": "gpt", "deployments": [{
        "provider": "azure", "model": "gpt-4o", "azure_deployment": "my dep/v2?x",
        "api_base": base, "api_key": "az-key", "api_version": "2024-10-21"}]}]}  # fmt: skip
    client = await gateway(cfg)
    body = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    req = seen[0]
    assert req.raw_path == (
        "/openai/deployments/my%20dep%2Fv2%3Fx/chat/completions?api-version=2024-10-21"
    )
    assert req.match_info["dep"] == "my dep/v2?x"
    assert req.query["api-version"] == "2024-10-21"


async def test_openapi_describes_the_routes(gateway: GatewayFactory, azure: Any) -> None:
    cfg = {"models": [{"alias": "a", "deployments": [{"model": "m", "api_base": "http://x"}]}]}
    client = await gateway(cfg)
    spec = await (await client.get("/openapi.json")).json()
    assert spec["openapi"].startswith("3.")
    assert {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"} <= set(
        spec["paths"]
    )
    assert "messages" in spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
