"""Replicas share their prefix records through Redis: a prompt routed by one replica is a
prefix hit on the same engine when its next turn reaches another replica."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import pytest

from fleetgate.resources import RedisConnections
from fleetgate.routing.prefix import PrefixIndex
from fleetgate.routing.prefix_share import PrefixShare
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory

pytestmark = pytest.mark.redis

GROUPS = [f"You are the assistant of product line {g}, answer briefly. " * 30 for g in range(3)]


async def _until(predicate: Any, timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_records_reach_the_other_replicas_only(redis_url: str) -> None:
    redis_a, redis_b = RedisConnections(), RedisConnections()  # one owner per replica
    a = PrefixShare(redis_a.client(redis_url), "replica-a", PrefixIndex())
    b = PrefixShare(redis_b.client(redis_url), "replica-b", PrefixIndex())
    for share in (a, b):
        await share.start()
    try:
        await asyncio.sleep(0.3)  # both subscribed
        a.record("http://engine-1:8000", [11, 12, 13])
        a.record("http://engine-2:8000", [21])
        await a.flush()
        await _until(lambda: b.index.match("http://engine-1:8000", [11, 12, 13, 14]) == 3)
        assert b.index.match("http://engine-2:8000", [21]) == 1
        assert b.applied == 2
        assert a.applied == 0  # its own message is skipped
        a.apply(b"not json")  # a stray message changes nothing
    finally:
        await a.aclose()
        await b.aclose()
        await redis_a.aclose()
        await redis_b.aclose()


async def test_the_next_turn_on_another_replica_hits_the_same_engine(
    redis_url: str, gateway: GatewayFactory
) -> None:  # Redis first: it outlives the gateways, as in a deployment
    sim = SimConfig(model="m", prefill_ms_per_token=0.002, decode_ms_per_step=0.5,
                    kv_blocks=400, block_size=16, output_len=4)  # fmt: skip
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(running_sim(sim)) for _ in range(2)]
        config = {
            "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": [
                {"model": "m", "api_base": f"{u}/v1", "name": f"sim{i}"}
                for i, u in enumerate(urls)]}],
            "routing": {"scrape_interval_s": 0.05, "redis_url": redis_url},
        }  # fmt: skip
        replica_a = await gateway(config)
        replica_b = await gateway(config)
        await asyncio.sleep(0.3)  # both subscribed to the record channel

        async def ask(client: Any, group: int, turn: int) -> dict[str, Any]:
            body = {"model": "chat", "max_tokens": 4, "messages": [
                {"role": "system", "content": GROUPS[group]},
                {"role": "user", "content": f"question {turn}"}]}  # fmt: skip
            resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
            assert resp.status == 200, await resp.text()
            await resp.read()
            log = await client.get("/admin/routing/decisions?alias=chat", headers=AUTH)
            decision: dict[str, Any] = (await log.json())["data"][-1]
            return decision

        first = [await ask(replica_a, g, 0) for g in range(len(GROUPS))]
        await asyncio.sleep(0.3)  # published and applied
        for g, seen in enumerate(first):
            later = await ask(replica_b, g, 1)  # B never saw this prefix itself
            assert later["picked"] == seen["picked"], (g, later, seen)
            assert later["reason"] == "prefix-hit", later
