"""``GET /admin/cost`` and ``fleetgate cost`` through a real HTTP server, against simulators
serving DCGM-shaped metrics, with spend written by real requests of two teams."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from fleetgate.app import GATEWAY
from fleetgate.cli.main import main
from fleetgate.config.loader import parse_config
from fleetgate.cost.feature import parse_cost_config
from fleetgate.errors import ConfigError
from fleetgate.sim import SimConfig, running_sim
from fleetgate.tenancy.ports import TENANCY
from tests.conftest import AUTH, MASTER, GatewayFactory

SIM = SimConfig(mode="random", decode_ms_per_step=4.0, output_len=40, max_num_seqs=8)


@contextlib.asynccontextmanager
async def _sims(n: int) -> AsyncIterator[list[str]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(running_sim(SIM)) for _ in range(n)]


def _config(a: str, b: str, c: str) -> dict[str, Any]:
    dep = lambda url: {"provider": "openai", "model": "tiny", "api_base": f"{url}/v1"}  # noqa: E731
    return {
        "models": [{"alias": "chat", "deployments": [dep(a), dep(b)]},
                   {"alias": "spare", "deployments": [dep(c)]}],
        "extensions": {"cost": {
            "gpu_price_per_hour": 2.5, "scrape_interval_s": 0.05, "idle_below_util_pct": 5,
            "target_util_pct": 60, "window_h": 1,
            "pools": [{"alias": "chat", "dcgm": [f"{a}/dcgm/metrics", f"{b}/dcgm/metrics"]},
                      {"alias": "spare", "dcgm": [f"{c}/dcgm/metrics"], "gpu_price_per_hour": 4}],
        }},
    }  # fmt: skip


async def _post(client: Any, path: str, body: dict[str, Any], key: str = MASTER) -> Any:
    resp = await client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
    assert resp.status in (200, 201), await resp.text()
    return await resp.json()


async def _load(url: str, seconds: float) -> None:
    """Keep one request running on a simulator for ``seconds`` (direct, not via the gateway)."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            if time.monotonic() > deadline:
                break
            async with http.post(f"{url}/v1/chat/completions", json=body) as resp:
                await resp.read()


async def test_cost_report_pools_teams_and_recommendations(
    gateway: GatewayFactory, tmp_path: Path
) -> None:
    async with _sims(3) as (a, b, c):
        client = await gateway(_config(a, b, c))
        team_a = (await _post(client, "/admin/teams", {"name": "search"}))["id"]
        team_b = (await _post(client, "/admin/teams", {"name": "ads"}))["id"]
        user_a = (await _post(client, "/admin/keys", {"team": team_a}))["key"]
        user_b = (await _post(client, "/admin/keys", {"team": team_b}))["key"]
        admin_b = await _post(client, "/admin/keys", {"team": team_b, "role": "team_admin"})
        chat = {"model": "chat", "messages": [{"role": "user", "content": "hello"}]}
        for key in (user_a, user_a, user_a, user_b):
            await _post(client, "/v1/chat/completions", chat, key)
        await _load(a, 1.0)  # sim a busy for a second while the feature scrapes every 50 ms
        gw = client.server.app[GATEWAY]
        assert gw.core.ports.get(TENANCY) is not None
        await gw.core.ports.require(TENANCY).writer.flush()

        resp = await client.get("/admin/cost", headers=AUTH)
        assert resp.status == 200
        report = await resp.json()
        pools = {p["pool"]: p for p in report["pools"]}
        chat_pool, spare = pools["chat"], pools["spare"]
        assert chat_pool["gpus"] == 2 and spare["gpus"] == 1
        assert 0 < chat_pool["utilisation"] < 1
        assert 0 < chat_pool["idle_gpu_hours"] < chat_pool["gpu_hours"]
        assert chat_pool["cost_usd"] == pytest.approx(chat_pool["gpu_hours"] * 2.5)
        assert chat_pool["engine_idle_fraction"] < 1  # its engines had requests in flight
        assert spare["utilisation"] == 0 and spare["engine_idle_fraction"] == 1
        assert spare["idle_gpu_hours"] == pytest.approx(spare["gpu_hours"])
        assert spare["idle_cost_usd"] == pytest.approx(spare["gpu_hours"] * 4)
        recs = {r["pool"]: r for r in report["recommendations"]}
        assert recs["spare"]["action"] == "scale_to_zero" and recs["spare"]["reclaim_gpus"] == 1
        # one request at a time on an 8-slot engine: 39 % of one GPU; one GPU is enough
        assert recs["chat"]["action"] == "release" and recs["chat"]["reclaim_gpus"] == 1

        spend = await (await client.get("/admin/spend?group_by=team", headers=AUTH)).json()
        tokens = {r["team"]: r["input_tokens"] + r["output_tokens"] for r in spend["data"]}
        teams = {t["team"]: t for t in report["teams"]}
        assert set(teams) == {team_a, team_b}
        share_a = tokens[team_a] / (tokens[team_a] + tokens[team_b])
        assert teams[team_a]["share"] == pytest.approx(share_a)
        assert teams[team_a]["team_name"] == "search"
        assert teams[team_a]["cost_usd"] == pytest.approx(chat_pool["cost_usd"] * share_a, rel=0.05)

        # a team admin: its own team's rows, no fleet-wide pools
        own = await client.get("/admin/cost", headers={"Authorization": f"Bearer {admin_b['key']}"})
        assert own.status == 200
        mine = await own.json()
        assert "pools" not in mine and [t["team"] for t in mine["teams"]] == [team_b]
        assert mine["teams"][0]["share"] == pytest.approx(1 - share_a)
        # a user key may not; bad windows are 400s
        assert (
            await client.get("/admin/cost", headers={"Authorization": f"Bearer {user_a}"})
        ).status == 403
        assert (await client.get("/admin/cost")).status == 401
        for bad in ("abc", "0", "2"):
            resp = await client.get(f"/admin/cost?hours={bad}", headers=AUTH)
            assert resp.status == 400
            assert "hours" in (await resp.json())["error"]["message"]

        # the CLI against the same server (urllib blocks: run it off the loop)
        url = str(client.make_url("/")).rstrip("/")
        code = await asyncio.to_thread(
            main, ["cost", "--url", url, "--key", MASTER, "--hours", "0.5"]
        )
        assert code == 0


async def test_cost_cli_table(gateway: GatewayFactory, capsys: pytest.CaptureFixture[str]) -> None:
    async with _sims(3) as (a, b, c):
        client = await gateway(_config(a, b, c))
        await asyncio.sleep(0.3)
        url = str(client.make_url("/")).rstrip("/")
        assert await asyncio.to_thread(main, ["cost", "--url", url, "--key", MASTER]) == 0
        out = capsys.readouterr().out
        assert "pool" in out and "chat" in out and "spare" in out
        assert await asyncio.to_thread(main, ["cost", "--url", url, "--key", "nope"]) == 2
        assert "401" in capsys.readouterr().err
        assert (
            await asyncio.to_thread(main, ["cost", "--url", url, "--key", MASTER, "-o", "json"])
            == 0
        )
        data = orjson.loads(capsys.readouterr().out)
        assert data[0]["window_hours"] == 1


def test_bad_cost_config_is_refused_with_the_field_named() -> None:
    base = _config("http://a", "http://b", "http://c")
    bad_alias = orjson.loads(orjson.dumps(base))
    bad_alias["extensions"]["cost"]["pools"][0]["alias"] = "nope"
    with pytest.raises(ConfigError, match="pool nope is not a configured alias"):
        parse_cost_config(parse_config(bad_alias))
    bad_url = orjson.loads(orjson.dumps(base))
    bad_url["extensions"]["cost"]["pools"][0]["dcgm"] = ["gpu-node:9400"]
    with pytest.raises(ConfigError, match=r"extensions.cost.pools.0.dcgm"):
        parse_cost_config(parse_config(bad_url))
    bad_price = orjson.loads(orjson.dumps(base))
    bad_price["extensions"]["cost"]["gpu_price_per_hour"] = -1
    with pytest.raises(ConfigError, match="gpu_price_per_hour"):
        parse_cost_config(parse_config(bad_price))


async def test_without_tenancy_pools_are_reported_and_teams_are_not(
    gateway: GatewayFactory,
) -> None:
    async with _sims(3) as (a, b, c):
        client = await gateway({**_config(a, b, c), "tenancy": {"enabled": False}})
        for _ in range(100):  # up to 5 s for the first scrapes
            report = await (await client.get("/admin/cost", headers=AUTH)).json()
            if all(p["gpus"] for p in report["pools"]):
                break
            await asyncio.sleep(0.05)
        assert [p["gpus"] for p in report["pools"]] == [2, 1]
        assert report["teams"] == [] and "tenancy is off" in report["teams_note"]
