"""The epp pick's wait for a sleeping pool is bounded by the picker's ``hold_s``, the wake-up
included: a wake-up that outlasts it is answered 503 with ``Retry-After`` before Envoy's own
timer fires, the wake-up goes on, and the retry waits on that same wake-up (one engine start).
Around it: reclaim's settle does not sleep an engine a pick just woke, and one long wake-up is
asked of the engine once."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.contract.request import GatewayRequest
from fleetgate.epp.picker import EndpointPicker
from fleetgate.errors import NoHealthyDeployment
from fleetgate.routing import wake as wake_module
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import GatewayFactory
from tests.procs import free_port
from tests.routing.support import route_ctx

WAKE_UP_S = 1.5


def _config(url: str) -> dict[str, Any]:
    wake = {"hold_s": 10, "poll_interval_s": 0.1, "sleep_after_idle_s": 600}
    dep = {"model": "tiny", "api_base": f"{url}/v1", "name": "pool0", "wake": wake}
    return {"models": [{"alias": "tiny", "deployments": [dep]}]}


def _request() -> GatewayRequest:
    req = route_ctx("tiny").request
    assert isinstance(req, GatewayRequest)
    return req


async def _post(url: str) -> None:
    async with aiohttp.ClientSession() as s, s.post(url) as r:
        assert r.status == 200


async def _is_sleeping(sim: str) -> bool:
    async with aiohttp.ClientSession() as s, s.get(f"{sim}/is_sleeping") as r:
        return bool((await r.json())["is_sleeping"])


async def test_a_wake_up_longer_than_the_hold_is_a_503_and_the_retry_shares_it(
    gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_sim(SimConfig(mode="echo", wake_up_s=WAKE_UP_S)) as sim:
        await _post(f"{sim}/sleep")
        client = await gateway(_config(sim))
        gw = client.app[GATEWAY]
        await gw.dispatcher.waker.sync_sleeping()
        (dep,) = gw.tables.table.deployments()
        assert dep.state.asleep
        caplog.set_level(logging.INFO, logger="fleetgate.wake")

        short = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0, hold_s=0.3)
        started = time.monotonic()
        with pytest.raises(NoHealthyDeployment) as refused:
            await short.choose(_request(), None)
        assert time.monotonic() - started < 1.0  # the hold, not the wake-up's 1.5 s
        assert refused.value.status == 503
        assert refused.value.headers["Retry-After"] == "1"
        assert dep.state.in_flight == 0

        # the client's retry: the wake-up that began goes on and is waited for, not restarted
        picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0, hold_s=5)
        choice = await picker.choose(_request(), None)
        assert choice.primary.deployment is dep
        assert time.monotonic() - started < WAKE_UP_S + 1.0
        assert not await _is_sleeping(sim)
        assert not dep.state.asleep
        await choice.release(None)
        waking = [r for r in caplog.records if r.getMessage() == "waking pool0"]
        assert len(waking) == 1


async def test_a_pick_that_woke_the_engine_in_reclaims_settle_keeps_it_awake(
    gateway: GatewayFactory,
) -> None:
    """Reclaim marks an idle pool asleep, then waits ``settle_s`` before ``POST /sleep``; a
    pick in that time wakes it (the waker clears the mark) and Envoy sends the request. The
    replica shares that wake-up only on its watch's next tick: reclaim must not sleep the
    engine meanwhile, or the next pick (believing it awake) sends Envoy to a sleeping engine
    and the request fails. Here the watch never ticks before the settle ends."""
    async with running_sim(SimConfig(mode="echo", wake_up_s=0.3)) as sim:
        dep_config = {"model": "tiny", "api_base": f"{sim}/v1", "name": "pool0",
                      "wake": {"hold_s": 10, "poll_interval_s": 0.1}}  # fmt: skip
        config = {
            "models": [{"alias": "tiny", "deployments": [dep_config]}],
            "reclaim": {
                "below_util_pct": 20, "window_s": 1.0, "sample_interval_s": 0.1,
                "settle_s": 1.0, "activity_interval_s": 0.2, "lease_s": 30,
                "pools": [{"deployment": "pool0", "action": "sleep"}],
            },
        }  # fmt: skip
        client = await gateway(config)
        gw = client.app[GATEWAY]
        (feature,) = [f for f in gw.features.all if f.name == "reclaim"]
        reclaimer = feature.reclaimer
        (dep,) = gw.tables.table.deployments()
        picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0, hold_s=5)

        deadline = time.monotonic() + 30
        while reclaimer.state("pool0").state != "asleep":  # marked: the settle begins
            assert time.monotonic() < deadline, "the idle pool is never reclaimed"
            await asyncio.sleep(0.01)
        assert dep.state.asleep and not await _is_sleeping(sim)

        async def later() -> None:  # the watch's tick comes after the settle
            return None

        reclaimer._follow_wakes = later
        choice = await picker.choose(_request(), None)  # woken (a no-op on the engine)
        await choice.hold()
        assert not dep.state.asleep
        await choice.release(None)  # Envoy's request was answered
        await asyncio.sleep(1.5)  # the settle ends

        # what the next pick returns is what Envoy sends to: it must be awake
        assert not dep.state.asleep
        assert not await _is_sleeping(sim)
        choice = await picker.choose(_request(), None)
        assert choice.primary.deployment is dep and not await _is_sleeping(sim)
        await choice.release(None)
        skipped = [d for d in reclaimer.decisions if d["action"] == "skip"]
        assert [d["code"] for d in skipped] == ["woken"]


class _Engine:
    """An engine whose ``POST /wake_up`` takes ``reload_s`` while it sleeps; counts the calls."""

    def __init__(self, *, sleeping: bool, reload_s: float = 0.6) -> None:
        self.sleeping = sleeping
        self.reload_s = reload_s
        self.calls: list[float] = []
        self.runner: web.AppRunner | None = None

    async def _wake_up(self, request: web.Request) -> web.Response:
        self.calls.append(time.monotonic())
        if self.sleeping:
            await asyncio.sleep(self.reload_s)  # the weights reload
            self.sleeping = False
        return web.Response()

    async def _is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.sleeping})

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/wake_up", self._wake_up)
        app.router.add_get("/is_sleeping", self._is_sleeping)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"


async def test_a_wake_up_longer_than_one_call_timeout_is_asked_for_once(
    gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /wake_up`` returns when the engine is awake: a large model's reload outlasts the
    waker's 10 s call timeout (here shortened to 0.2 s). The call waits as long as the hold
    instead of being cut off and sent again: the engine is told to wake once."""
    engine = _Engine(sleeping=True)
    url = await engine.start()
    try:
        monkeypatch.setattr(wake_module, "_CALL_TIMEOUT", aiohttp.ClientTimeout(total=0.2))
        client = await gateway(_config(url))
        gw = client.app[GATEWAY]
        (dep,) = gw.tables.table.deployments()
        dep.state.asleep = True
        await gw.dispatcher.waker.ensure_awake(dep)
        assert not dep.state.asleep and not engine.sleeping
        assert len(engine.calls) == 1, engine.calls
    finally:
        assert engine.runner is not None
        await engine.runner.cleanup()


async def test_an_engine_woken_elsewhere_is_not_told_to_wake_again(
    gateway: GatewayFactory,
) -> None:
    """Two pickers behind one Envoy: the first request after a sleep reached one, which woke
    the engine; this one still believes it asleep (the shared state reaches it within a poll)
    when the next request comes. It asks ``/is_sleeping`` first and sends no second
    ``POST /wake_up``."""
    engine = _Engine(sleeping=False)
    url = await engine.start()
    try:
        client = await gateway(_config(url))
        gw = client.app[GATEWAY]
        (dep,) = gw.tables.table.deployments()
        dep.state.asleep = True
        await gw.dispatcher.waker.ensure_awake(dep)
        assert not dep.state.asleep
        assert engine.calls == []
    finally:
        assert engine.runner is not None
        await engine.runner.cleanup()
