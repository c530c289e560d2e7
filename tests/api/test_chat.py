"""The chat, completions, embeddings and models routes, in-process against a fake upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream, Reply


async def test_chat_passes_vendor_fields_and_renames_model(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "logprobs": True,
        "seed": 7,
        "n": 2,
        "cache_salt": "team-a",
        "chat_template_kwargs": {"enable_thinking": False},
    }
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    assert resp.headers["x-fleetgate-deployment"] == "a"
    assert float(resp.headers["x-fleetgate-overhead-ms"]) >= 0
    sent = upstream.seen[-1].body
    assert sent["model"] == "up-model"
    for key in ("tools", "tool_choice", "response_format", "logprobs", "seed", "n",
                "chat_template_kwargs"):  # fmt: skip
        assert sent[key] == body[key], key
    # A caller's own cache_salt reaches the engine namespaced by its tenant (routing/salt.py).
    assert isinstance(sent["cache_salt"], str) and sent["cache_salt"] != body["cache_salt"]
    data = await resp.json()
    assert data["choices"][0]["message"]["content"] == "Hello there."


async def test_tool_call_response_is_relayed(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    upstream.queue(Reply(tool_calls=[call], finish_reason="tool_calls"))
    client = await gateway(one_alias(upstream))
    resp = await client.post(
        "/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "x"}]},
        headers=AUTH,
    )
    data = await resp.json()
    assert data["choices"][0]["message"]["tool_calls"] == [call]
    assert data["choices"][0]["finish_reason"] == "tool_calls"


async def _sse(resp: Any) -> list[Any]:
    events = []
    async for line in resp.content:
        line = line.strip()
        if line.startswith(b"data: "):
            payload = line[6:]
            events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return events


async def test_stream_strips_usage_unless_asked(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    req = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    resp = await client.post("/v1/chat/completions", json=req, headers=AUTH)
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    events = await _sse(resp)
    assert upstream.seen[-1].body["stream_options"] == {"include_usage": True}
    assert events[-1] == "[DONE]"
    assert all(e == "[DONE]" or e["choices"] for e in events)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == "Hello there."

    req["stream_options"] = {"include_usage": True}
    events = await _sse(await client.post("/v1/chat/completions", json=req, headers=AUTH))
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 2


async def test_stream_usage_lands_in_metrics(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    req = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    await _sse(await client.post("/v1/chat/completions", json=req, headers=AUTH))
    text = await (await client.get("/metrics")).text()
    assert (
        'fleetgate_tokens_total{alias="tiny",deployment="a",version="v1",direction="output"} 2'
        in text
    )
    assert (
        'fleetgate_requests_total{alias="tiny",deployment="a",version="v1",status="200"} 1' in text
    )
    assert "fleetgate_ttft_seconds_count" in text
    assert "fleetgate_inter_token_latency_seconds_count" in text
    assert "fleetgate_overhead_seconds_count" in text


async def test_completions_and_embeddings(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    client = await gateway(one_alias(upstream))
    resp = await client.post(
        "/v1/completions", json={"model": "tiny", "prompt": "Once"}, headers=AUTH
    )
    assert resp.status == 200
    assert upstream.seen[-1].path == "/v1/completions"
    resp = await client.post(
        "/v1/embeddings", json={"model": "tiny", "input": ["a", "b"]}, headers=AUTH
    )
    assert resp.status == 200
    assert len((await resp.json())["data"]) == 2


async def test_models_lists_aliases(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    cfg = one_alias(upstream)
    cfg["models"].append(
        {"alias": "smart", "deployments": [{"model": "m", "api_base": upstream.url}]}
    )
    client = await gateway(cfg)
    data = await (await client.get("/v1/models", headers=AUTH)).json()
    assert [m["id"] for m in data["data"]] == ["tiny", "smart"]
    assert (await client.get("/v1/models/smart", headers=AUTH)).status == 200
    assert (await client.get("/v1/models/nope", headers=AUTH)).status == 404


async def test_client_disconnect_cancels_upstream(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content=" ".join(["w"] * 200), chunk_delay=0.02))
    client = await gateway(one_alias(upstream))
    req = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    resp = await client.post("/v1/chat/completions", json=req, headers=AUTH)
    await resp.content.readline()
    resp.close()
    for _ in range(20):  # the cancel must reach the upstream within 100 ms
        if upstream.cancelled:
            break
        await asyncio.sleep(0.005)
    assert upstream.cancelled == 1
