"""kv-aware through the whole gateway, against simulated vLLM engines and a fake upstream."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import aiohttp

from fleetgate.routing.engine_metrics import parse_engine_metrics
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

GROUPS = [f"You are assistant number {g} for a very specific product line. " * 30 for g in range(3)]


async def _hits(urls: list[str]) -> tuple[float, float]:
    hits = queries = 0.0
    async with aiohttp.ClientSession() as http:
        for url in urls:
            async with http.get(f"{url}/metrics") as resp:
                snap = parse_engine_metrics(await resp.text())
            hits += snap.prefix_hits or 0.0
            queries += snap.prefix_queries or 0.0
    return hits, queries


async def _run(gateway: GatewayFactory, strategy: str) -> tuple[float, Any]:
    sim = SimConfig(model="m", prefill_ms_per_token=0.002, decode_ms_per_step=0.5,
                    kv_blocks=80, block_size=16, output_len=4)  # fmt: skip
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(running_sim(sim)) for _ in range(2)]
        deployments = [{"model": "m", "api_base": f"{u}/v1", "name": f"sim{i}"}
                       for i, u in enumerate(urls)]  # fmt: skip
        client = await gateway({
            "models": [{"alias": "chat", "strategy": strategy, "deployments": deployments}],
            "routing": {"scrape_interval_s": 0.05},
        })  # fmt: skip
        for turn in range(4):
            for g, system in enumerate(GROUPS):
                body = {"model": "chat", "max_tokens": 4, "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"group {g} question {turn}"}]}  # fmt: skip
                resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
                assert resp.status == 200, await resp.text()
                await resp.read()
        await asyncio.sleep(0.15)  # at least one scrape after the last request
        engines = await (await client.get("/admin/routing/engines", headers=AUTH)).json()
        hits, queries = await _hits(urls)
        decisions = await (await client.get("/admin/routing/decisions?alias=chat",
                                            headers=AUTH)).json()  # fmt: skip
        return hits / queries, {"engines": engines, "decisions": decisions}


async def test_kv_aware_gets_more_prefix_cache_hits_than_round_robin(
    gateway: GatewayFactory,
) -> None:
    rr_ratio, _ = await _run(gateway, "round-robin")
    kv_ratio, seen = await _run(gateway, "kv-aware")
    # 3 long prefixes, KV for about one per engine: only routing by prefix keeps them warm.
    assert kv_ratio > rr_ratio + 0.2, (kv_ratio, rr_ratio)
    engines = seen["engines"]["data"]
    assert len(engines) == 2 and all(e["engine"] == "vllm" and e["scraped"] for e in engines)
    decisions = seen["decisions"]
    assert len(decisions["data"]) == 12
    assert {d["reason"] for d in decisions["data"]} >= {"prefix-hit"}
    assert decisions["hit_ratio"]["chat"] > 0.5


async def test_cache_salt_and_affinity_reach_the_upstream(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    client = await gateway({
        "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": [
            {"model": "m", "api_base": u.url, "name": u.name} for u in (upstream, upstream_b)]}],
        "routing": {"cache_salt": "always"},
    })  # fmt: skip
    picked = set()
    for i in range(4):
        body = {"model": "chat", "messages": [{"role": "user", "content": f"turn {i}"}]}
        resp = await client.post("/v1/chat/completions", json=body,
                                 headers={**AUTH, "X-Conversation-Id": "c-42"})  # fmt: skip
        assert resp.status == 200
        picked.add(resp.headers["x-fleetgate-deployment"])
    assert len(picked) == 1  # the conversation stays on one replica
    seen = upstream.seen + upstream_b.seen
    salts = {s.body.get("cache_salt") for s in seen if s.path.endswith("/chat/completions")}
    assert len(salts) == 1 and None not in salts


async def test_decisions_endpoint_needs_the_master_key(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway({"models": [{"alias": "chat", "strategy": "kv-aware", "deployments": [
        {"model": "m", "api_base": upstream.url}]}]})  # fmt: skip
    resp = await client.get("/admin/routing/decisions")
    assert resp.status == 401
    resp = await client.get("/admin/routing/decisions?limit=x", headers=AUTH)
    assert resp.status == 400
