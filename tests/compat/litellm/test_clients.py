"""Clients configured for a LiteLLM proxy, pointed at fleetgate as they are (the `openai` SDK)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.tenancy.support import MASTER, running_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("suffix", ["", "/v1"])
async def test_openai_sdk_with_base_url_with_or_without_v1(
    upstream: str, tmp_path: Path, suffix: str
) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, _, key = await gw.team_and_key("ml")
        sdk = openai.AsyncOpenAI(base_url=gw.url + suffix, api_key=key, max_retries=0)
        chat = await sdk.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4)
        assert chat.choices[0].message.content
        text = await sdk.completions.create(model="tiny", prompt="hi", max_tokens=4)
        assert text.choices[0].text
        emb = await sdk.embeddings.create(model="tiny", input="hi")
        assert emb.data[0].embedding
        assert {m.id for m in (await sdk.models.list()).data} >= {"tiny", "other"}
        assert (await sdk.models.retrieve("tiny")).id == "tiny"
        chunks = [
            c
            async for c in await sdk.chat.completions.create(
                model="tiny", messages=HELLO, max_tokens=4, stream=True
            )
        ]
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
        with pytest.raises(openai.NotFoundError):  # served nowhere: the gateway's own 404
            await sdk.moderations.create(input="hi")
        await sdk.close()


async def test_bare_paths_are_the_v1_routes_own_answers(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        auth = {"Authorization": f"Bearer {MASTER}"}
        async with gw.session.get(gw.url + "/models/nope", headers=auth) as resp:
            v1 = await gw.session.get(gw.url + "/v1/models/nope", headers=auth)
            assert resp.status == v1.status == 404
            assert (await resp.json())["error"]["type"] == (await v1.json())["error"]["type"]
            v1.release()
        async with gw.session.get(gw.url + "/chat/completions", headers=auth) as resp:
            assert resp.status == 405  # a served path asked with another method
        async with gw.session.post(gw.url + "/chat/completions", json={}) as resp:
            assert resp.status == 401  # one authentication, the route's own
        async with gw.session.post(gw.url + "/chat/completions", headers=auth, data=b"{") as r:
            assert r.status == 400


@pytest.mark.parametrize("header", ["x-litellm-api-key", "api-key"])
async def test_litellm_and_azure_key_headers_authenticate(
    upstream: str, tmp_path: Path, header: str
) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, key_id, key = await gw.team_and_key("ml", aliases=["tiny"])
        sdk = openai.AsyncOpenAI(
            base_url=gw.url, api_key="unused", default_headers={header: key}, max_retries=0
        )
        # Authorization carries "unused": x-litellm-api-key wins over it (as LiteLLM reads
        # it); api-key is read only when there is no Authorization header
        if header == "api-key":
            body = {"model": "tiny", "messages": HELLO, "max_tokens": 4}
            async with gw.session.post(
                gw.url + "/v1/chat/completions", json=body, headers={header: key}
            ) as resp:
                assert resp.status == 200
            with pytest.raises(openai.AuthenticationError):
                await sdk.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4)
        else:
            chat = await sdk.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4)
            assert chat.choices[0].message.content
            bearer = {header: f"Bearer {key}"}
            async with gw.session.get(gw.url + "/v1/models", headers=bearer) as resp:
                assert resp.status == 200
            with pytest.raises(openai.NotFoundError):  # the key's alias list still holds
                await sdk.chat.completions.create(model="other", messages=HELLO, max_tokens=4)
        async with gw.session.get(gw.url + "/models", headers={header: "sk-fg-wrong"}) as resp:
            assert resp.status == 401
        # the management routes read the same headers (one authenticator chain)
        async with gw.session.get(gw.url + "/key/info", headers={header: key}) as resp:
            assert resp.status == 200
            assert (await resp.json())["info"]["key_alias"] == key_id
        await sdk.close()


async def test_azure_openai_sdk_deployment_paths(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, _, key = await gw.team_and_key("ml")
        sdk = openai.AsyncAzureOpenAI(
            azure_endpoint=gw.url, api_key=key, api_version="2024-06-01", max_retries=0
        )
        chat = await sdk.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4)
        assert chat.choices[0].message.content
        emb = await sdk.embeddings.create(model="tiny", input="hi")
        assert emb.data[0].embedding
        await sdk.close()


async def test_health_in_litellm_words(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        for path in ("/health/liveliness", "/health/liveness"):
            async with gw.session.get(gw.url + path) as resp:
                assert resp.status == 200 and await resp.json() == "I'm alive!"
        async with gw.session.get(gw.url + "/health/readiness") as resp:
            body = await resp.json()
            assert resp.status == 200, body
            assert body["status"] == "healthy" and body["db"] == "connected"


async def test_readiness_is_503_while_the_database_is_away(upstream: str, tmp_path: Path) -> None:
    away = "postgresql://postgres@127.0.0.1:1/none"  # nothing listens there
    async with running_gateway(upstream, tmp_path, away) as gw:
        async with gw.session.get(gw.url + "/health/readiness") as resp:
            body = await resp.json()
        assert resp.status == 503, body
        assert body["status"] == "unhealthy" and body["db"] == "Not connected"
        async with gw.session.get(gw.url + "/health/liveliness") as resp:
            assert resp.status == 200
