"""kv-aware through the gateway with engines that publish KV events (simulated vLLM)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import aiohttp

from fleetgate.sim import SimConfig
from fleetgate.sim.app import SIM_KV_EVENTS
from fleetgate.sim.runner import start_sim
from tests.conftest import AUTH, GatewayFactory

DOC = "Reference manual section. " + " ".join(f"clause{i} applies" for i in range(120))


async def _fleet(stack: AsyncExitStack) -> list[dict[str, Any]]:
    deps = []
    for i in range(2):
        # ``*`` ports: each publisher binds free ports itself (no window for another test to
        # take a port picked beforehand)
        cfg = SimConfig(model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.2,
                        output_len=2, kv_blocks=256, block_size=16,
                        kv_events_endpoint="tcp://127.0.0.1:*",
                        kv_events_replay_endpoint="tcp://127.0.0.1:*")  # fmt: skip
        runner, url = await start_sim(cfg)
        stack.push_async_callback(runner.cleanup)
        publisher = runner.app[SIM_KV_EVENTS]
        deps.append({"model": "m", "api_base": f"{url}/v1", "name": f"sim{i}",
                     "kv_events": {"endpoint": publisher.endpoint,
                                   "replay_endpoint": publisher.replay_endpoint}})  # fmt: skip
    return deps


async def _ask(client: Any, question: str) -> dict[str, Any]:
    body = {"model": "chat", "max_tokens": 2, "messages": [
        {"role": "system", "content": DOC}, {"role": "user", "content": question}]}  # fmt: skip
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def _last_decision(client: Any) -> dict[str, Any]:
    resp = await client.get("/admin/routing/decisions?alias=chat", headers=AUTH)
    return dict((await resp.json())["data"][0])


async def test_routing_follows_what_engines_report_not_what_was_sent(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        deps = await _fleet(stack)
        client = await gateway({
            "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": deps}],
            "routing": {"scrape_interval_s": 0.05, "tenant_isolation": False},
        })  # fmt: skip
        await asyncio.sleep(0.3)
        await _ask(client, "first question")
        first = await _last_decision(client)
        await asyncio.sleep(0.2)  # the stored blocks' events arrive
        answer = await _ask(client, "second question")
        second = await _last_decision(client)
        # Predicted from the engine's events, and the engine agrees.
        assert second["picked"] == first["picked"] and second["reason"] == "prefix-hit"
        cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert second["cached_tokens"] == cached > 0
        # The engine drops its cache: the gateway's own index would still expect a hit there.
        api = next(d["api_base"] for d in deps if d["name"] == first["picked"])
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{api[:-3]}/reset_prefix_cache") as resp:
                assert resp.status == 200
        await asyncio.sleep(0.2)
        answer = await _ask(client, "third question")
        third = await _last_decision(client)
        assert third["cached_tokens"] == 0 == answer["usage"]["prompt_tokens_details"][
            "cached_tokens"]  # fmt: skip
        metrics = (await (await client.get("/metrics", headers=AUTH)).read()).decode()
        assert 'fleetgate_kv_events_trusted{engine="' in metrics
        assert 'source="events"' in metrics and 'source="gateway"' not in metrics
