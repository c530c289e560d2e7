"""End to end in one process: a gateway with the scheduler in front of a simulated engine.

The pool is one deployment with ``max_num_seqs: 2``; teams and keys come from the tenancy
admin API (SQLite in the test's data dir). The same flood against the same engine without the
scheduler (engine-side FIFO) is the control: the fair order must come from the scheduler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.fakes import FakeUpstream, Reply
from tests.scheduling.support import reloadable_gateway
from tests.tenancy.support import MASTER, Gateway

Result = tuple[int, dict[str, str], Any]


def _config(api_base: str, scheduling: dict[str, Any], **deployment: Any) -> GatewayConfig:
    dep = {"model": "tiny", "api_base": api_base, "max_num_seqs": 2, **deployment}
    return GatewayConfig.model_validate(
        {
            "models": [{"alias": "tiny", "deployments": [dep]}],
            "health": {"probe_interval_s": 30},
            "tenancy": {"spend_flush_interval_s": 0.05},
            "scheduling": scheduling,
        }
    )


@asynccontextmanager
async def _gateway(data_dir: Path, config: GatewayConfig) -> AsyncIterator[Gateway]:
    settings = Settings(master_key=MASTER, data_dir=data_dir, watch_config=False)
    runner = web.AppRunner(create_app(settings, config), handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            yield Gateway(f"http://127.0.0.1:{port}", runner.app, session)
    finally:
        await runner.cleanup()


async def _chat(gw: Gateway, key: str, max_tokens: int = 12, **headers: str) -> Result:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "tell me a story"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    sent = {
        "Authorization": f"Bearer {key}",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    async with gw.session.post(f"{gw.url}/v1/chat/completions", json=body, headers=sent) as r:
        return r.status, {k.lower(): v for k, v in r.headers.items()}, await r.json()


async def _flood_then_steady(gw: Gateway, key_a: str, key_b: str) -> list[str]:
    """Team a sends 10 at once, team b 2 a little later: the order in which they finish."""
    done: list[str] = []

    async def one(team: str, key: str) -> None:
        status, _, body = await _chat(gw, key)
        assert status == 200, body
        done.append(team)

    flood = [asyncio.create_task(one("a", key_a)) for _ in range(10)]
    await asyncio.sleep(0.03)
    steady = [asyncio.create_task(one("b", key_b)) for _ in range(2)]
    await asyncio.wait_for(asyncio.gather(*flood, *steady), 30)
    return done


SIM = SimConfig(decode_ms_per_step=4.0, output_len=12, max_num_seqs=2)


async def test_a_steady_team_is_served_fairly_during_another_teams_flood(tmp_path: Path) -> None:
    async with running_sim(SIM) as sim:
        async with _gateway(tmp_path / "fair", _config(f"{sim}/v1", {})) as gw:
            _, _, key_a = await gw.team_and_key("flood")
            _, _, key_b = await gw.team_and_key("steady")
            fair = await _flood_then_steady(gw, key_a, key_b)
        off = _config(f"{sim}/v1", {"enabled": False})
        async with _gateway(tmp_path / "fifo", off) as gw:
            _, _, key_a = await gw.team_and_key("flood")
            _, _, key_b = await gw.team_and_key("steady")
            fifo = await _flood_then_steady(gw, key_a, key_b)
    # With the scheduler b's requests start at the next free slots (its counter is lifted to
    # a's, then they alternate): both are done before a's sixth. Engine FIFO serves a's
    # eight queued requests first.
    assert fair.index("b") < 6 and len(fair) - fair[::-1].index("b") - 1 < 7, fair
    assert fifo[:8].count("b") == 0, fifo


async def test_critical_overtakes_a_batch_flood_and_the_queue_is_visible(tmp_path: Path) -> None:
    # No batch headroom (its default keeps a slot free of whole batch-band responses): the
    # flood fills the pool, and the critical request has to queue.
    async with (
        running_sim(SIM) as sim,
        _gateway(tmp_path, _config(f"{sim}/v1", {"batch_headroom": 0})) as gw,
    ):
        _, _, batch = await gw.team_and_key("batch", tags={"priority": "batch"})
        _, _, critical = await gw.team_and_key("oncall", tags={"priority": "critical"})
        done: list[str] = []

        async def one(name: str, key: str) -> Result:
            result = await _chat(gw, key)
            done.append(name)
            return result

        flood = [asyncio.create_task(one("batch", batch)) for _ in range(10)]
        await asyncio.sleep(0.03)
        status, queues = await gw.admin("GET", "/admin/queues")
        assert status == 200 and queues["enabled"]
        (pool,) = queues["data"]
        assert pool["pool"] == "tiny" and pool["capacity"] == 2 and pool["admitted"] == 2
        assert pool["queued"]["batch"] == 8 and pool["saturated"]
        status, headers, _ = await one("critical", critical)
        assert status == 200 and float(headers["x-fleetgate-queue-ms"]) > 0
        assert done.index("critical") <= 3, done  # after at most the two running ones (+1)
        await asyncio.wait_for(asyncio.gather(*flood), 30)
        async with gw.session.get(f"{gw.url}/metrics") as resp:
            metrics = await resp.text()
        assert (
            'fleetgate_scheduling_queue_wait_seconds_count{pool="tiny",band="critical"' in metrics
        )
        assert 'fleetgate_scheduling_queued_total{pool="tiny",band="batch"' in metrics


async def test_reject_shed_and_bad_headers_over_http(tmp_path: Path) -> None:
    scheduling = {"max_wait_s": {"sheddable": 0.05}}
    async with running_sim(SIM) as sim, _gateway(tmp_path, _config(f"{sim}/v1", scheduling)) as gw:
        _, _, key = await gw.team_and_key("busy")
        flood = [asyncio.create_task(_chat(gw, key, max_tokens=40)) for _ in range(4)]
        await asyncio.sleep(0.03)
        status, _, body = await _chat(gw, key, x_fleetgate_priority="sheddable")
        assert status == 503 and body["error"]["code"] == "queue_timeout", body
        status, _, body = await _chat(gw, key, x_fleetgate_priority="urgent")
        assert status == 400 and body["error"]["param"] == "x-fleetgate-priority"
        status, _, body = await _chat(gw, key, x_fleetgate_ttft_deadline_ms="soon")
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
        started = time.perf_counter()
        status, _, body = await _chat(gw, key, x_fleetgate_ttft_deadline_ms="20")
        assert status == 503 and body["error"]["code"] in (
            "deadline_exceeded",
            "deadline_unmeetable",
        )
        assert time.perf_counter() - started < 1.0
        results = await asyncio.wait_for(asyncio.gather(*flood), 30)
        assert all(r[0] == 200 for r in results)
        status, queues = await gw.admin("GET", "/admin/queues")
        assert queues["data"][0]["queued"] == {
            "critical": 0, "interactive": 0, "batch": 0, "sheddable": 0
        }  # fmt: skip


async def test_the_reject_policy_answers_429(tmp_path: Path) -> None:
    async with running_sim(SIM) as sim:
        config = _config(f"{sim}/v1", {})
        async with _gateway(tmp_path, config) as gw:
            team, _, key = await gw.team_and_key("busy")
            strict_team, _, strict = await gw.team_and_key("strict")
        section = {"teams": {strict_team: {"on_saturation": "reject"}}}
        async with _gateway(tmp_path, _config(f"{sim}/v1", section)) as gw:
            flood = [asyncio.create_task(_chat(gw, key, max_tokens=40)) for _ in range(3)]
            await asyncio.sleep(0.03)
            status, headers, body = await _chat(gw, strict)
            assert status == 429 and body["error"]["code"] == "pool_saturated", body
            assert int(headers["retry-after"]) >= 1
            await asyncio.wait_for(asyncio.gather(*flood), 30)
            status, _, _ = await _chat(gw, strict)  # room again: served
            assert status == 200
        del team


async def test_engines_with_priority_get_the_band(tmp_path: Path) -> None:
    async with FakeUpstream("p") as up:
        up.queue(Reply(), Reply())
        config = _config(up.url, {}, priority=True)
        async with _gateway(tmp_path, config) as gw:
            _, _, key = await gw.team_and_key("t", tags={"priority": "batch"})
            assert (await _chat(gw, key))[0] == 200
            assert (await _chat(gw, key, x_fleetgate_priority="sheddable"))[0] == 200
        assert [s.body.get("priority") for s in up.seen] == [5, 7]  # 2 x band + 1
    async with FakeUpstream("q") as up:
        async with _gateway(tmp_path / "q", _config(up.url, {})) as gw:
            _, _, key = await gw.team_and_key("t")
            assert (await _chat(gw, key))[0] == 200
        assert "priority" not in up.seen[0].body  # only to engines that take it


async def test_admin_queues_needs_an_admin_key_and_shows_a_team_admin_its_own_team(
    tmp_path: Path,
) -> None:
    async with running_sim(SIM) as sim, _gateway(tmp_path, _config(f"{sim}/v1", {})) as gw:
        team_a, _, key_a = await gw.team_and_key("a")
        team_b, _, key_b = await gw.team_and_key("b")
        status, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": team_a, "role": "team_admin"}
        )
        assert status == 201, admin
        assert (await _chat(gw, key_a))[0] == 200 and (await _chat(gw, key_b))[0] == 200
        status, body = await gw.admin("GET", "/admin/queues", key=key_a)
        assert status == 403 and body["error"]["type"] == "permission_error"
        status, mine = await gw.admin("GET", "/admin/queues", key=admin["key"])
        assert status == 200 and set(mine["data"][0]["teams"]) == {team_a}
        status, every = await gw.admin("GET", "/admin/queues?pool=tiny")
        assert set(every["data"][0]["teams"]) == {team_a, team_b}
        status, none = await gw.admin("GET", "/admin/queues?pool=other")
        assert status == 200 and none["data"] == []


async def test_a_config_reload_applies_new_policies_and_capacity(tmp_path: Path) -> None:
    async with running_sim(SIM) as sim:
        config = _config(f"{sim}/v1", {}).model_dump(mode="json", exclude_defaults=True)
        async with reloadable_gateway(tmp_path, config) as gateway:
            gw = gateway.gw
            team, _, key = await gw.team_and_key("t")
            assert (await _chat(gw, key))[0] == 200  # the pool exists, capacity 2
            config["scheduling"] = {"teams": {team: {"on_saturation": "reject"}}}
            config["models"][0]["deployments"][0]["max_num_seqs"] = 1
            await gateway.reload(config)
            busy = asyncio.create_task(_chat(gw, key, max_tokens=40))
            await asyncio.sleep(0.03)
            status, _, body = await _chat(gw, key)
            assert status == 429 and body["error"]["code"] == "pool_saturated"
            assert (await busy)[0] == 200
            _, queues = await gw.admin("GET", "/admin/queues")
            assert queues["data"][0]["capacity"] == 1


async def test_a_response_cache_hit_is_answered_without_waiting_for_a_full_pool(
    tmp_path: Path,
) -> None:
    sim_cfg = SimConfig(decode_ms_per_step=20.0, output_len=12, max_num_seqs=1)
    async with running_sim(sim_cfg) as sim:
        config = _config(f"{sim}/v1", {}, max_num_seqs=1)
        config = GatewayConfig.model_validate(
            {**config.model_dump(exclude_unset=True),
             "models": [{**config.models[0].model_dump(exclude_unset=True),
                         "cache": {"exact": True}}]}
        )  # fmt: skip
        async with _gateway(tmp_path, config) as gw:
            _, _, key = await gw.team_and_key("t")
            body = {"model": "tiny", "temperature": 0, "max_tokens": 8,
                    "messages": [{"role": "user", "content": "cached question"}]}  # fmt: skip
            auth = {"Authorization": f"Bearer {key}"}
            url = f"{gw.url}/v1/chat/completions"
            async with gw.session.post(url, json=body, headers=auth) as r:
                assert r.status == 200 and r.headers["x-fleetgate-cache"] == "miss"
            # the pool's one slot is held by a long generation (100 steps of 20 ms)...
            hold = asyncio.create_task(_chat(gw, key, max_tokens=100))
            await asyncio.sleep(0.2)
            async with gw.session.post(url, json=body, headers=auth) as r:
                assert r.status == 200 and r.headers["x-fleetgate-cache"] == "hit-exact"
                assert "x-fleetgate-queue-ms" not in r.headers
            # answered while the slot was still held: it did not queue behind the generation
            assert not hold.done()
            status, _, _ = await hold
            assert status == 200


async def _stream(gw: Gateway, key: str, max_tokens: int) -> str:
    """One streamed chat to its end; its request id (the engine's timing record's)."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "go"}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    async with gw.session.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200
        text = (await r.read()).decode()
    assert text.rstrip().endswith("data: [DONE]")
    return r.headers["x-request-id"]


async def test_the_next_stream_reaches_the_engine_before_the_last_step_ends(
    tmp_path: Path,
) -> None:
    """One engine slot, two streams: with ``start_before_end: 1`` the second request reaches
    the engine while the first's last step runs and starts at the step that frees the slot;
    without it, only after the first has ended (the gateway learns of the end after it)."""
    sim_cfg = SimConfig(decode_ms_per_step=40.0, output_len=8, max_num_seqs=1)
    async with running_sim(sim_cfg) as sim:
        for early in (1, 0):
            config = _config(f"{sim}/v1", {"start_before_end": early}, max_num_seqs=1)
            async with _gateway(tmp_path / str(early), config) as gw:
                _, _, key = await gw.team_and_key("t")
                first = asyncio.create_task(_stream(gw, key, 8))
                await asyncio.sleep(0.05)  # the second queues in the gateway behind it
                second = asyncio.create_task(_stream(gw, key, 8))
                one, two = await asyncio.wait_for(asyncio.gather(first, second), 10)
                async with gw.session.get(f"{sim}/sim/timings") as r:
                    records = {t["request_id"]: t for t in await r.json()}
            a, b = records[one], records[two]
            if early:
                assert b["arrival"] < a["ended"]  # sent while the first's last step ran
                assert b["scheduled"] - a["ended"] < 0.02  # the step that freed the slot
            else:
                assert b["arrival"] >= a["ended"]
