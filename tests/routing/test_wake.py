"""Scale-to-zero and sleep mode: the gateway holds a request for a pool that is not up yet
instead of failing it, and drives vLLM's sleep mode for idle deployments."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from fleetgate.api.state import GATEWAY
from fleetgate.cli.processes import free_port
from fleetgate.sim import SimConfig, running_sim, start_sim
from tests.conftest import AUTH, GatewayFactory
from tests.procs import metric_value

BODY = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def _config(url: str, wake: dict[str, Any] | None) -> dict[str, Any]:
    dep: dict[str, Any] = {"model": "tiny", "api_base": f"{url}/v1", "name": "pool0"}
    if wake is not None:
        dep["wake"] = wake
    return {
        "models": [{"alias": "tiny", "deployments": [dep]}],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
    }


async def _held(client: Any) -> float:
    text = await (await client.get("/metrics")).text()
    return metric_value(text, "fleetgate_held_requests", alias="tiny")


async def test_scaled_to_zero_pool_serves_the_held_request(gateway: GatewayFactory) -> None:
    port = free_port()
    wake = {"hold_s": 30, "poll_interval_s": 0.2}
    client = await gateway(_config(f"http://127.0.0.1:{port}", wake))
    runners = []

    async def autoscaler() -> float:
        """Like KEDA on fleetgate_held_requests: starts the pool once a request is held; the
        engine then takes 5 s to come up."""
        while await _held(client) < 1:
            await asyncio.sleep(0.05)
        await asyncio.sleep(5.0)
        runner, _ = await start_sim(SimConfig(mode="echo"), port=port)
        runners.append(runner)
        return time.monotonic()

    started = time.monotonic()
    scaler = asyncio.create_task(autoscaler())
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    try:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["choices"][0]["message"]["content"]
        up_at = await scaler
        assert up_at - started >= 5.0  # it was held through the engine's start, not refused
        assert await _held(client) == 0
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_without_wake_the_absent_pool_fails_at_once(gateway: GatewayFactory) -> None:
    client = await gateway(_config(f"http://127.0.0.1:{free_port()}", None))
    started = time.monotonic()
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.status in (502, 503)
    assert time.monotonic() - started < 2.0


async def test_a_hold_ends_after_hold_s_with_an_openai_error(gateway: GatewayFactory) -> None:
    wake = {"hold_s": 1, "poll_interval_s": 0.1}
    client = await gateway(_config(f"http://127.0.0.1:{free_port()}", wake))
    started = time.monotonic()
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    waited = time.monotonic() - started
    assert resp.status in (502, 503)
    assert "error" in await resp.json()
    assert 1.0 <= waited < 4.0
    assert await _held(client) == 0
    # a pool at zero does not make the gateway unready: its requests are held, not refused
    ready = await client.get("/health/ready")
    assert ready.status == 200
    assert (await ready.json())["aliases"]["tiny"] == {"healthy": 0, "wakeable": 1, "total": 1}


async def _is_sleeping(sim: str) -> bool:
    async with aiohttp.ClientSession() as s, s.get(f"{sim}/is_sleeping") as r:
        return bool((await r.json())["is_sleeping"])


async def test_idle_deployment_is_put_to_sleep_and_woken_for_the_next_request(
    gateway: GatewayFactory,
) -> None:
    async with running_sim(SimConfig(mode="echo", wake_up_s=0.5)) as sim:
        wake = {"hold_s": 10, "poll_interval_s": 0.1, "sleep_after_idle_s": 0.2}
        client = await gateway(_config(sim, wake))
        waker = client.app[GATEWAY].dispatcher.waker
        assert (await client.post("/v1/chat/completions", json=BODY, headers=AUTH)).status == 200
        assert await waker.sleep_idle() == []  # just used: not idle yet
        await asyncio.sleep(0.3)
        assert await waker.sleep_idle() == ["pool0"]
        assert await _is_sleeping(sim)
        text = await (await client.get("/metrics")).text()
        assert metric_value(text, "fleetgate_deployment_asleep", deployment="pool0") == 1
        # two requests at once share one wake-up and are both served
        replies = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=BODY, headers=AUTH) for _ in range(2))
        )
        assert [r.status for r in replies] == [200, 200]
        assert not await _is_sleeping(sim)
        text = await (await client.get("/metrics")).text()
        assert metric_value(text, "fleetgate_deployment_asleep", deployment="pool0") == 0


async def test_a_deployment_found_asleep_at_start_is_woken_for_its_first_request(
    gateway: GatewayFactory,
) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        async with aiohttp.ClientSession() as s, s.post(f"{sim}/sleep") as r:
            assert r.status == 200
        wake = {"hold_s": 10, "poll_interval_s": 0.1, "sleep_after_idle_s": 600}
        client = await gateway(_config(sim, wake))
        await client.app[GATEWAY].dispatcher.waker.sync_sleeping()
        resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
        assert resp.status == 200
        assert not await _is_sleeping(sim)
