"""A client's engine-internal fields (KV transfer, request id, queue priority, cache salt...)
never reach an engine, on any kind of call; the gateway's own still do."""

from __future__ import annotations

from typing import Any

from fleetgate.api.completions import answer
from fleetgate.api.state import GATEWAY
from fleetgate.config.schema import TimeoutConfig
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint
from fleetgate.providers.base import UpstreamCall
from fleetgate.providers.engine_fields import ENGINE_ONLY, sealed
from fleetgate.routing.disagg import prefill_body
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

# What a hostile client sends beside its prompt: every value is one the gateway never sets.
HOSTILE: dict[str, Any] = {
    "kv_transfer_params": {
        "do_remote_prefill": True,
        "remote_engine_id": "victim",
        "remote_block_ids": [1, 2, 3],
        "remote_host": "10.0.0.9",
        "remote_port": 5600,
    },
    "ec_transfer_params": {"mm-hash": {"remote_host": "10.0.0.9"}},
    "vllm_xargs": {"connector": "steal"},
    "request_id": "chatcmpl-someone-else",
    "cache_salt": "client-chosen-salt",
    "session_id": "someone-elses-session",
    "bootstrap_host": "10.0.0.9",
    "bootstrap_room": 42,
    "rid": "someone-else",
    "lora_path": "/etc/passwd",
    "custom_logit_processor": "gASV...",
    "data_parallel_rank": 0,
}


def _config(url: str) -> dict[str, Any]:
    return {
        "models": [
            {
                "alias": "tiny",
                "deployments": [
                    {"provider": "openai", "model": "m", "api_base": url, "engine": "vllm"}
                ],
            }
        ]
    }


def _leaks(body: dict[str, Any]) -> dict[str, Any]:
    """The client's engine-internal fields that reached the engine unchanged."""
    return {k: v for k, v in HOSTILE.items() if body.get(k) == v}


async def test_no_kind_of_call_passes_a_clients_engine_fields(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream.url))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    calls = [
        ("/v1/chat/completions", chat),
        ("/v1/chat/completions", {**chat, "stream": True}),
        ("/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 5}),
        ("/v1/embeddings", {"model": "tiny", "input": "hi"}),
    ]
    for path, body in calls:
        resp = await client.post(path, json={**body, **HOSTILE}, headers=AUTH)
        assert resp.status == 200, (path, await resp.text())
        await resp.read()
        seen = upstream.seen[-1].body
        assert _leaks(seen) == {}, path
        assert seen["cache_salt"] != HOSTILE["cache_salt"]  # the tenant's salt instead
    # a batch line takes the same path without HTTP
    gw = client.app[GATEWAY]
    status, _ = await answer(
        gw,
        Endpoint.CHAT,
        Principal(key_id="master", role="master"),
        {**chat, **HOSTILE},
        request_id="batch-line-1",
        headers={},
        batch=True,
    )
    assert status == 200
    assert _leaks(upstream.seen[-1].body) == {}


async def test_fields_an_engine_does_not_own_still_pass(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream.url))
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"enable_thinking": False},
        "top_k": 5,
    }
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    seen = upstream.seen[-1].body
    assert seen["chat_template_kwargs"] == {"enable_thinking": False} and seen["top_k"] == 5


async def test_a_negative_priority_is_refused_with_a_400(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream.url))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    for path, body in (
        ("/v1/chat/completions", chat),
        ("/v1/completions", {"model": "tiny", "prompt": "hi"}),
        ("/v1/embeddings", {"model": "tiny", "input": "hi"}),
    ):
        resp = await client.post(path, json={**body, "priority": -100}, headers=AUTH)
        assert resp.status == 400, path
        error = (await resp.json())["error"]
        assert error["param"] == "priority" and error["type"] == "invalid_request_error"
    assert upstream.seen == []
    ok = await client.post("/v1/chat/completions", json={**chat, "priority": 3}, headers=AUTH)
    assert ok.status == 200
    assert "priority" not in upstream.seen[-1].body  # the gateway's band decides, not the client


def test_the_gateways_own_engine_fields_are_what_is_sent() -> None:
    body = {"model": "m", "messages": [], **HOSTILE, "priority": -5}
    call = UpstreamCall(Endpoint.CHAT, dict(body), False, TimeoutConfig())
    mine = {"kv_transfer_params": {"remote_engine_id": "prefill-0"}, "priority": 3}
    out = sealed(call, {**mine, "cache_salt": "tenant-salt"}).body
    assert out["kv_transfer_params"] == mine["kv_transfer_params"]
    assert out["priority"] == 3 and out["cache_salt"] == "tenant-salt"
    assert not (set(out) & ENGINE_ONLY - {"kv_transfer_params", "priority", "cache_salt"})


def test_a_native_responses_call_drops_them_from_the_clients_responses_fields_too() -> None:
    call = UpstreamCall(
        Endpoint.CHAT,
        {"model": "m", "messages": []},
        False,
        TimeoutConfig(),
        responses={"reasoning": {"effort": "low"}, "kv_transfer_params": {"remote_host": "x"}},
    )
    assert sealed(call, None).responses == {"reasoning": {"effort": "low"}}


def test_the_prefill_half_of_a_pd_pair_carries_none_of_the_clients() -> None:
    body = {"model": "chat", "messages": [], "max_tokens": 50, **HOSTILE, "priority": -1}
    out = prefill_body(body, "m", {"cache_salt": "tenant-salt"})
    assert _leaks(out) == {} and "priority" not in out
    assert out["kv_transfer_params"]["do_remote_decode"] is True
