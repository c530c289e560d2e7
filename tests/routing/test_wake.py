"""Scale-to-zero and sleep mode: the gateway holds a request for a pool that is not up yet
instead of failing it, and drives vLLM's sleep mode for idle deployments."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from fleetgate.api.state import GATEWAY
from fleetgate.epp.picker import EndpointPicker
from fleetgate.errors import NoHealthyDeployment
from fleetgate.sim import SimConfig, running_sim, start_sim
from fleetgate.sim.config import FaultConfig
from tests.conftest import AUTH, GatewayFactory
from tests.procs import free_port, metric_value
from tests.routing.support import route_ctx

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


async def _sleep(sim: str) -> None:
    """Puts the engine to sleep behind the gateway's back (as another replica's reclaim does
    in the instant after this replica looked)."""
    async with aiohttp.ClientSession() as s, s.post(f"{sim}/sleep") as r:
        assert r.status == 200


async def test_an_engine_asleep_unknown_to_the_gateway_is_woken_and_serves(
    gateway: GatewayFactory,
) -> None:
    """The reclaim race: the only engine of the alias refuses (503 engine_sleeping) because it
    fell asleep after the pick; the request wakes it and is served there, with no retry left
    (num_retries 0) and no cool-down counted against the engine."""
    async with running_sim(SimConfig(mode="echo", wake_up_s=0.3)) as sim:
        config = _config(sim, {"hold_s": 10, "poll_interval_s": 0.1})  # as reclaim's pools
        config["router"]["num_retries"] = 0
        client = await gateway(config)
        (dep,) = client.app[GATEWAY].tables.table.deployments()
        assert (await client.post("/v1/chat/completions", json=BODY, headers=AUTH)).status == 200
        await _sleep(sim)
        assert not dep.state.asleep  # the gateway does not know
        streamed = {**BODY, "stream": True}
        replies = await asyncio.gather(
            client.post("/v1/chat/completions", json=BODY, headers=AUTH),
            client.post("/v1/chat/completions", json=streamed, headers=AUTH),
        )
        assert [r.status for r in replies] == [200, 200], [await r.text() for r in replies]
        assert (await replies[0].json())["choices"][0]["message"]["content"]
        assert "data: [DONE]" in await replies[1].text()
        assert not await _is_sleeping(sim)
        assert (dep.state.asleep, dep.state.consecutive_failures) == (False, 0)
        assert dep.state.healthy()


async def test_a_failure_of_an_awake_engine_is_not_taken_for_sleep(
    gateway: GatewayFactory,
) -> None:
    """An engine that answers 5xx while awake fails the attempt as before (asked once,
    not resent): only a sleeping engine is woken and sent the request again."""
    async with running_sim(
        SimConfig(mode="echo", faults=FaultConfig(error_rate=1.0, error_status=503))
    ) as sim:
        config = _config(sim, {"hold_s": 2, "poll_interval_s": 0.1})
        config["router"]["num_retries"] = 0
        client = await gateway(config)
        started = time.monotonic()
        resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
        assert resp.status >= 500 and "error" in await resp.json()
        assert time.monotonic() - started < 1.5  # not held for hold_s


async def test_choose_wakes_a_first_pick_known_asleep_before_returning_it(
    gateway: GatewayFactory,
) -> None:
    """A data plane (``fleetgate epp``) sends to ``picks[0]`` as soon as `choose` returns: a
    pick the gateway knows asleep is awake by then, as the relay wakes it before its send."""
    async with running_sim(SimConfig(mode="echo", wake_up_s=0.3)) as sim:
        await _sleep(sim)
        wake = {"hold_s": 10, "poll_interval_s": 0.1, "sleep_after_idle_s": 600}
        client = await gateway(_config(sim, wake))
        gw = client.app[GATEWAY]
        await gw.dispatcher.waker.sync_sleeping()
        (dep,) = gw.tables.table.deployments()
        assert dep.state.asleep
        chosen = await gw.dispatcher.choose(gw.tables.table, route_ctx("tiny").request)
        assert chosen.picks[0].deployment is dep
        assert not dep.state.asleep
        assert not await _is_sleeping(sim)


async def test_epp_pick_holds_a_scaled_to_zero_pool_until_it_answers(
    gateway: GatewayFactory,
) -> None:
    """Behind Envoy the engine's 503s cooled the only deployment down (`Choice.answered`);
    the next pick is held, counted in fleetgate_held_requests for the autoscaler, until the
    engine answers, then returns it."""
    port = free_port()
    client = await gateway(
        _config(f"http://127.0.0.1:{port}", {"hold_s": 30, "poll_interval_s": 0.1})
    )
    gw = client.app[GATEWAY]
    (dep,) = gw.tables.table.deployments()
    dep.state.cooldown_until = time.monotonic() + 600
    picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0, hold_s=30)
    picking = asyncio.create_task(picker.choose(route_ctx("tiny").request, None))
    while await _held(client) < 1:
        assert not picking.done(), picking.exception()
        await asyncio.sleep(0.05)
    runner, _ = await start_sim(SimConfig(mode="echo"), port=port)
    try:
        choice = await asyncio.wait_for(picking, 20)
        assert choice.primary.deployment is dep
        assert await _held(client) == 0
        await choice.release(None)
    finally:
        await runner.cleanup()


async def test_epp_pick_hold_is_bounded_by_the_pickers_hold_s(gateway: GatewayFactory) -> None:
    """The hold ends at the picker's ``hold_s`` (below Envoy's ext_proc timeout) even when the
    pool's ``wake.hold_s`` is longer: the pick fails with a 503, not Envoy's timeout."""
    client = await gateway(
        _config(f"http://127.0.0.1:{free_port()}", {"hold_s": 30, "poll_interval_s": 0.1})
    )
    gw = client.app[GATEWAY]
    (dep,) = gw.tables.table.deployments()
    dep.state.cooldown_until = time.monotonic() + 600
    picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0, hold_s=0.5)
    started = time.monotonic()
    with pytest.raises(NoHealthyDeployment):
        await picker.choose(route_ctx("tiny").request, None)
    assert 0.5 <= time.monotonic() - started < 3.0
    assert await _held(client) == 0


async def test_an_engine_that_refused_envoy_while_asleep_is_woken_by_the_next_pick(
    gateway: GatewayFactory,
) -> None:
    """Behind Envoy the picker cannot resend: the engine that fell asleep after the pick
    answers Envoy 503. The picker asks it `/is_sleeping`, marks it asleep without a
    cool-down, and the next pick wakes it before Envoy sends to it."""
    async with running_sim(SimConfig(mode="echo", wake_up_s=0.2)) as sim:
        client = await gateway(_config(sim, {"hold_s": 10, "poll_interval_s": 0.1}))
        gw = client.app[GATEWAY]
        (dep,) = gw.tables.table.deployments()
        picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0)
        choice = await picker.choose(route_ctx("tiny").request, None)
        await choice.hold()
        await _sleep(sim)  # another replica's reclaim, after the pick
        choice.answered(503)  # what Envoy got from the engine
        await choice.release(None)
        for _ in range(100):  # bounded: the question runs in the background
            if dep.state.asleep:
                break
            await asyncio.sleep(0.02)
        assert (dep.state.asleep, dep.state.consecutive_failures) == (True, 0)  # forgiven
        choice = await picker.choose(route_ctx("tiny").request, None)
        assert choice.primary.deployment is dep
        assert not await _is_sleeping(sim)
        await choice.release(None)
