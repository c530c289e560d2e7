"""Idle pools reclaimed (#37 item 6): a simulated pool idle for the (shortened) window is put to
sleep and woken by the next request, both audited; a pool that is the only capacity of an alias
with traffic is never reclaimed, while the same idle pool beside other capacity is."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, MASTER, GatewayFactory
from tests.procs import metric_value
from tests.reclaim.support import (
    BODY,
    FAST,
    deployment,
    is_sleeping,
    reclaim_rows,
    until,
)


async def _audit(client: Any) -> list[dict[str, Any]]:
    resp = await client.get("/admin/audit?kind=admin&limit=500", headers=AUTH)
    assert resp.status == 200, await resp.text()
    rows: list[dict[str, Any]] = (await resp.json())["data"]
    return rows


async def _ask(client: Any, alias: str) -> dict[str, Any]:
    resp = await client.post("/v1/chat/completions", json={"model": alias, **BODY}, headers=AUTH)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def _metrics(client: Any) -> str:
    return str(await (await client.get("/metrics")).text())


async def test_an_idle_pool_is_put_to_sleep_and_woken_by_the_next_request(
    gateway: GatewayFactory,
) -> None:
    async with running_sim(SimConfig(mode="echo", wake_up_s=0.3)) as sim:
        config = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
            "reclaim": {**FAST, "pools": [{"deployment": "pool0", "action": "sleep"}]},
        }
        client = await gateway(config)
        started = time.monotonic()
        await until(lambda: is_sleeping(sim), 10.0, "the idle pool is put to sleep")
        # not before its whole window was observed under the threshold
        assert time.monotonic() - started >= FAST["window_s"]
        rows = await _audit(client)
        slept = reclaim_rows(rows, "sleep", "pool0")
        assert len(slept) == 1, rows
        assert slept[0]["detail"]["utilisation_pct"] < 20
        assert slept[0]["actor_key_id"] == "reclaim"
        text = await _metrics(client)
        assert metric_value(text, "fleetgate_reclaim_keep", pool="pool0", alias="tiny") == 0
        assert metric_value(text, "fleetgate_deployment_asleep", deployment="pool0") == 1

        reply = await _ask(client, "tiny")  # the next request wakes it and is served
        assert reply["choices"][0]["message"]["content"]
        assert not await is_sleeping(sim)

        async def woken_audited() -> bool:
            return len(reclaim_rows(await _audit(client), "wake", "pool0")) == 1

        await until(woken_audited, 5.0, "the wake-up is audited")
        view = await (await client.get("/admin/reclaim", headers=AUTH)).json()
        (pool,) = view["pools"]
        assert pool["state"] == "awake" and pool["action"] == "sleep"
        assert [d["action"] for d in view["decisions"]][:2] == ["wake", "sleep"]
        text = await _metrics(client)
        assert metric_value(text, "fleetgate_reclaim_actions_total", pool="pool0",
                            action="sleep") == 1  # fmt: skip
        assert metric_value(text, "fleetgate_reclaim_actions_total", pool="pool0",
                            action="wake") == 1  # fmt: skip
        assert metric_value(text, "fleetgate_reclaim_keep", pool="pool0", alias="tiny") == 1


async def test_the_only_capacity_of_an_alias_with_traffic_is_never_reclaimed(
    gateway: GatewayFactory,
) -> None:
    """``solo`` (one pool) and ``duo`` (a pool and a second deployment) both get a request
    every 0.9 s in a 2.5 s window, under 20% of the time busy: duo's pool is reclaimed, solo's
    never is."""
    async with AsyncExitStack() as stack:
        sims = [await stack.enter_async_context(running_sim(SimConfig(mode="echo")))
                for _ in range(3)]  # fmt: skip
        config = {
            "models": [
                {"alias": "solo", "deployments": [deployment("solo-a", sims[0])]},
                {"alias": "duo", "deployments": [deployment("duo-a", sims[1]),
                                                 deployment("duo-b", sims[2])]},
            ],  # fmt: skip
            "reclaim": {**FAST, "window_s": 2.5,
                        "pools": [{"deployment": "solo-a"}, {"deployment": "duo-a"}]},
        }  # fmt: skip
        client = await gateway(config)
        solo_slept = False
        ended = time.monotonic() + 3 * 2.5 + 1.0
        while time.monotonic() < ended:
            await _ask(client, "solo")
            await _ask(client, "duo")
            solo_slept = solo_slept or await is_sleeping(sims[0])
            await asyncio.sleep(0.9)
        rows = await _audit(client)
        assert not solo_slept and not reclaim_rows(rows, "sleep", "solo-a")
        skipped = reclaim_rows(rows, "skip", "solo-a")
        # audited once per reason and window, not once per sample (3 windows: 2 to 4 rows)
        assert 1 <= len(skipped) <= 4, skipped
        assert skipped[0]["detail"]["code"] == "only_capacity"
        assert "only capacity of alias 'solo'" in skipped[0]["detail"]["reason"]
        assert reclaim_rows(rows, "sleep", "duo-a")  # the control: same idleness, reclaimed
        view = await (await client.get("/admin/reclaim", headers=AUTH)).json()
        solo = next(p for p in view["pools"] if p["pool"] == "solo-a")
        assert solo["state"] == "awake" and solo["utilisation_pct"] < 20
        assert solo["candidate"] and solo["decision"] == "only_capacity"
        text = await _metrics(client)
        assert metric_value(text, "fleetgate_reclaim_skips_total", pool="solo-a",
                            reason="only_capacity") >= 2  # fmt: skip


async def test_a_fallback_counts_as_capacity(gateway: GatewayFactory) -> None:
    """An alias with traffic whose one pool has a fallback alias: the pool may go."""
    async with running_sim(SimConfig(mode="echo")) as sim, running_sim(SimConfig()) as other:
        config = {
            "models": [
                {
                    "alias": "main",
                    "deployments": [deployment("main-a", sim)],
                    "fallbacks": ["spare"],
                },
                {"alias": "spare", "deployments": [deployment("spare-a", other)]},
            ],  # fmt: skip
            "reclaim": {**FAST, "pools": [{"deployment": "main-a"}]},
        }
        client = await gateway(config)
        await _ask(client, "main")
        await until(lambda: is_sleeping(sim), 10.0, "the pool with a fallback is reclaimed")
        assert not reclaim_rows(await _audit(client), "skip", "main-a")


async def test_scale_to_zero_drops_the_keep_gauge_and_a_request_raises_it(
    gateway: GatewayFactory,
) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        config = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
            "reclaim": {**FAST, "pools": [{"deployment": "pool0", "action": "scale_to_zero"}]},
        }
        client = await gateway(config)

        async def keep() -> float:
            return metric_value(await _metrics(client), "fleetgate_reclaim_keep", pool="pool0")

        assert await keep() == 1

        async def dropped() -> bool:
            return await keep() == 0

        await until(dropped, 10.0, "KEDA's keep signal drops for the idle pool")

        async def audited(action: str) -> bool:  # the audit row follows the shared state
            return bool(reclaim_rows(await _audit(client), action, "pool0"))

        await until(lambda: audited("scale_to_zero"), 5.0, "the scale-down is audited")
        assert not await is_sleeping(sim)  # scaled by KEDA, not put to sleep
        await _ask(client, "tiny")

        async def raised() -> bool:
            return await keep() == 1

        await until(raised, 5.0, "a request raises the keep signal again")
        await until(lambda: audited("wake"), 5.0, "the wake-up is audited")


async def test_the_admin_view_needs_the_master_key(gateway: GatewayFactory) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        config = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
            "reclaim": {**FAST, "window_s": 600, "pools": [{"deployment": "pool0"}]},
        }
        client = await gateway(config)
        assert (await client.get("/admin/reclaim")).status == 401
        bad = {"Authorization": f"Bearer {MASTER}x"}
        assert (await client.get("/admin/reclaim", headers=bad)).status == 401
        view = await (await client.get("/admin/reclaim", headers=AUTH)).json()
        (pool,) = view["pools"]
        assert pool["decision"] == "observing" and not pool["candidate"]
        assert pool["window_s"] == 600 and pool["below_util_pct"] == 20


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"deployment": "nope"}, "'nope' is not a configured deployment id"),
        ({"deployment": "bare"}, "'bare' has no 'wake:'"),
        ({"deployment": "pool0", "action": "shrink"}, "action"),
        ({"deployment": "pool0", "dcgm": ["gpu:9400"]}, "must start with http"),
    ],
)
def test_a_bad_reclaim_section_is_refused_naming_the_field(
    tmp_path: Any, pool: dict[str, Any], message: str
) -> None:
    sim = "http://127.0.0.1:9"
    config = {
        "models": [{"alias": "tiny", "deployments": [
            deployment("pool0", sim), {"model": "tiny", "api_base": f"{sim}/v1", "name": "bare"}]}],
        "reclaim": {"pools": [pool]},
    }  # fmt: skip
    with pytest.raises(ConfigError, match="reclaim") as err:
        build_state(Settings(master_key=MASTER, data_dir=tmp_path), parse_config(config))
    assert message in str(err.value)


async def test_a_reload_applies_a_new_window_and_refuses_a_bad_pool(tmp_path: Path) -> None:
    """Windows and thresholds are live (the section declares it); a reloaded section naming a
    pool without ``wake:`` is refused and the running one stays."""
    async with running_sim(SimConfig(mode="echo")) as sim:
        path = tmp_path / "gateway.yaml"
        bare = {"model": "tiny", "api_base": f"{sim}/v1", "name": "bare"}
        config: dict[str, Any] = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim), bare]}],
            "reclaim": {**FAST, "window_s": 600, "pools": [{"deployment": "pool0"}]},
        }
        path.write_text(yaml.safe_dump(config))
        settings = Settings(master_key=MASTER, data_dir=tmp_path, watch_config=False,
                            config_path=path)  # fmt: skip
        runner = web.AppRunner(create_app(settings), handler_cancellation=True)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with aiohttp.ClientSession(url, headers=AUTH) as http:

                async def reload() -> int:
                    path.write_text(yaml.safe_dump(config))
                    async with http.post("/admin/config/reload") as resp:
                        return resp.status

                await asyncio.sleep(2 * FAST["window_s"])
                assert not await is_sleeping(sim)  # a 600 s window: not yet
                config["reclaim"]["pools"] = [{"deployment": "bare"}]
                assert await reload() >= 400
                config["reclaim"] = {**FAST, "pools": [{"deployment": "pool0"}]}
                assert await reload() == 200
                await until(lambda: is_sleeping(sim), 10.0, "the new window applies")
                async with http.get("/admin/reclaim") as resp:
                    (pool,) = (await resp.json())["pools"]
                assert pool["window_s"] == FAST["window_s"] and pool["state"] == "asleep"
        finally:
            await runner.cleanup()


async def test_with_dcgm_the_gpus_utilisation_decides(gateway: GatewayFactory) -> None:
    """A pool whose two GPUs report 30% and 40% is kept though it has no request; once they
    report 5% and 15% it is reclaimed, and the audit carries DCGM's mean."""
    utils = [30.0, 40.0]

    async def exporter(request: web.Request) -> web.Response:
        lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}"}} {u}'
                 for i, u in enumerate(utils)]  # fmt: skip
        return web.Response(text="\n".join(lines) + "\n")

    app = web.Application()
    app.router.add_get("/metrics", exporter)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    dcgm = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    try:
        async with running_sim(SimConfig(mode="echo")) as sim:
            config = {
                "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
                "reclaim": {**FAST, "pools": [{"deployment": "pool0", "dcgm": [dcgm]}]},
            }
            client = await gateway(config)
            await asyncio.sleep(2 * FAST["window_s"])
            assert not await is_sleeping(sim)
            view = await (await client.get("/admin/reclaim", headers=AUTH)).json()
            assert view["pools"][0]["decision"] == "busy"
            assert view["pools"][0]["utilisation_pct"] == pytest.approx(35.0)
            utils[:] = [5.0, 15.0]
            await until(lambda: is_sleeping(sim), 10.0, "the GPUs went idle")
            (slept,) = reclaim_rows(await _audit(client), "sleep", "pool0")
            assert slept["detail"]["utilisation_pct"] < 20
    finally:
        await runner.cleanup()


async def test_the_traffic_rows_of_replicas_long_gone_are_pruned(gateway: GatewayFactory) -> None:
    """Each replica start writes its own traffic row; the acting replica deletes those of
    replicas silent for longer than any window looks back, and keeps the recent ones."""
    async with running_sim(SimConfig(mode="echo")) as sim:
        config = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
            "reclaim": {**FAST, "window_s": 600, "pools": [{"deployment": "pool0"}]},
        }
        client = await gateway(config)
        (feature,) = [f for f in client.app[GATEWAY].features.all if f.name == "reclaim"]
        reclaimer = feature.reclaimer
        now = time.time()
        await reclaimer.activity.put("gone", {"at": now - 7200, "aliases": {"tiny": now - 7200}})
        await reclaimer.activity.put("recent", {"at": now - 30, "aliases": {"tiny": now - 30}})

        async def pruned() -> bool:
            _, bodies = await reclaimer.activity.load()
            return "gone" not in bodies and "recent" in bodies and reclaimer.owner in bodies

        await until(pruned, 10.0, "the long-gone replica's row is pruned")
        assert reclaimer.traffic.last("aliases", "tiny") >= now - 30  # the recent one counts


async def test_an_engine_found_awake_while_shared_asleep_is_shared_awake(
    gateway: GatewayFactory,
) -> None:
    """A reclaimed engine woken behind the gateway's back (or by a request on a replica that
    learnt of the sleep too late) is shared as awake again within a sample: no replica's next
    request waits on a wake-up that does nothing."""
    async with running_sim(SimConfig(mode="echo")) as sim:
        config = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
            "reclaim": {**FAST, "pools": [{"deployment": "pool0", "action": "sleep"}]},
        }
        client = await gateway(config)
        await until(lambda: is_sleeping(sim), 10.0, "the idle pool is put to sleep")
        async with aiohttp.ClientSession() as s, s.post(f"{sim}/wake_up") as r:
            assert r.status == 200

        async def shared_awake() -> bool:
            rows = reclaim_rows(await _audit(client), "wake", "pool0")
            return any("found awake" in str(row["detail"]) for row in rows)

        await until(shared_awake, 5.0, "the awake engine is shared as awake and audited")
        text = await _metrics(client)
        assert metric_value(text, "fleetgate_deployment_asleep", deployment="pool0") == 0


async def test_an_engine_found_asleep_while_shared_awake_is_woken_by_the_next_request(
    gateway: GatewayFactory,
) -> None:
    """An engine put to sleep behind the gateway's back (or by a race with a request) is
    shared as asleep within a sample, so the next request wakes it instead of being refused."""
    async with running_sim(SimConfig(mode="echo")) as sim:
        config = {
            "models": [{"alias": "tiny", "deployments": [deployment("pool0", sim)]}],
            "reclaim": {**FAST, "window_s": 600, "pools": [{"deployment": "pool0"}]},
        }
        client = await gateway(config)
        await _ask(client, "tiny")
        async with aiohttp.ClientSession() as s, s.post(f"{sim}/sleep") as r:
            assert r.status == 200

        async def found() -> bool:
            return bool(reclaim_rows(await _audit(client), "found_asleep", "pool0"))

        await until(found, 5.0, "the sleeping engine is found and audited")
        await _ask(client, "tiny")  # woken for it, not refused
        assert not await is_sleeping(sim)

        async def woken() -> bool:
            return bool(reclaim_rows(await _audit(client), "wake", "pool0"))

        await until(woken, 5.0, "the wake-up is audited")
