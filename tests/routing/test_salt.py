"""Every strategy isolates tenants' prefix caches: vLLM gets a per-tenant ``cache_salt``, and a
caller's own salt is namespaced under its tenant."""

from __future__ import annotations

import asyncio
from typing import Any

from fleetgate.api.state import GATEWAY
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream


def _config(up_url: str, strategy: str, **dep: Any) -> dict[str, Any]:
    deployment = {"provider": "openai", "model": "m", "api_base": up_url, "name": "a", **dep}
    return {"models": [{"alias": "tiny", "strategy": strategy, "deployments": [deployment]}]}


async def _keys(client: Any, tag: str = "") -> list[dict[str, str]]:
    out = []
    for name in (f"t1{tag}", f"t2{tag}"):
        team = await (await client.post("/admin/teams", json={"name": name}, headers=AUTH)).json()
        key = await (
            await client.post("/admin/keys", json={"team": team["id"]}, headers=AUTH)
        ).json()
        out.append({"Authorization": f"Bearer {key['key']}"})
    return out


async def _salts(
    client: Any, up: FakeUpstream, keys: list[dict[str, str]], **body: Any
) -> list[Any]:
    for key in keys:
        req = {"model": "tiny", "messages": [{"role": "user", "content": "same prompt"}], **body}
        resp = await client.post("/v1/chat/completions", json=req, headers=key)
        assert resp.status == 200, await resp.text()
    return [s.body.get("cache_salt") for s in up.seen[-len(keys) :]]


async def test_default_strategies_salt_each_tenant_differently(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    for strategy in ("weighted", "least-load", "latency", "round-robin", "cost"):
        client = await gateway(_config(upstream.url, strategy, engine="vllm"))
        salts = await _salts(client, upstream, await _keys(client, strategy))
        assert all(isinstance(s, str) and s for s in salts), (strategy, salts)
        assert salts[0] != salts[1], strategy


async def test_a_callers_own_cache_salt_is_namespaced_by_tenant(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream.url, "weighted", engine="vllm"))
    salts = await _salts(client, upstream, await _keys(client), cache_salt="shared-salt")
    assert "shared-salt" not in salts
    assert salts[0] != salts[1]


async def test_engines_that_are_not_vllm_get_no_salt(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream.url, "weighted", engine="other"))
    assert await _salts(client, upstream, await _keys(client)) == [None, None]


async def test_vllm_is_recognised_from_its_models_answer(gateway: GatewayFactory) -> None:
    async with running_sim(SimConfig(mode="echo"), port=0) as url:
        client = await gateway(_config(f"{url}/v1", "weighted"))
        salt = client.app[GATEWAY].dispatcher.salt
        assert salt is not None
        for _ in range(50):
            if salt.kinds:
                break
            await asyncio.sleep(0.1)
        assert salt.kinds == {f"{url}/v1": "vllm"}
