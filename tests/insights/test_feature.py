"""End to end: each request's end user, session, conversation and plan are recorded with the
spend row's cost (hashed for a team that does not log payloads), the admin API reports them,
a team admin sees only its team, bad input is a 400, and without the section the routes are a
503; the key report names unused, never-expiring and broader-than-used keys."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from fleetgate.api.state import GATEWAY
from fleetgate.app import create_app
from fleetgate.cli.main import main as cli_main
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.http.serving import served
from fleetgate.insights.keys import key_report
from fleetgate.insights.tables import requests
from fleetgate.sim import SimConfig, running_sim
from fleetgate.tenancy.tables import spend
from tests.tenancy.support import MASTER, PRICE, Gateway, wait_for


def _config(upstream: str, insights: dict[str, Any] | None) -> dict[str, Any]:
    deployment = {"provider": "openai", "model": "tiny", "api_base": f"{upstream}/v1"}
    config: dict[str, Any] = {
        "models": [
            {"alias": "tiny", "deployments": [{**deployment, "price": PRICE}]},
            {"alias": "other", "deployments": [deployment]},
        ],
        "tenancy": {"spend_flush_interval_s": 0.05, "poll_interval_s": 0.2},
    }
    if insights is not None:
        # report_cache_s 0: each read sees the requests just made (the cache has its own tests)
        config["insights"] = {"flush_interval_s": 0.05, "report_cache_s": 0, **insights}
    return config


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="random", output_len=12)) as url:
        yield url


async def _gateway(upstream: str, tmp_path: Path, insights: dict[str, Any] | None) -> Any:
    settings = Settings(master_key=MASTER, data_dir=tmp_path, watch_config=False)
    return create_app(settings, GatewayConfig.model_validate(_config(upstream, insights)))


async def _chat(gw: Gateway, key: str, user: str, session: str) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "user": user}
    headers = {"Authorization": f"Bearer {key}", "x-session-id": session,
               "x-conversation-id": f"c-{session}"}  # fmt: skip
    async with gw.session.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200
        return r.headers["x-request-id"]


async def test_requests_are_recorded_by_user_session_and_plan(
    upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = await _gateway(upstream, tmp_path, {"revenue_usd_month": {"paid": 30}})
    async with served(app) as url, aiohttp.ClientSession() as session:
        gw = Gateway(url, app, session)
        quiet, _, quiet_key = await gw.team_and_key("quiet")
        loud, _, loud_key = await gw.team_and_key("loud", team_fields={"log_payloads": True})
        status, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": loud, "role": "team_admin"}
        )
        assert status == 201, admin
        # the plan follows a reload: the quiet team pays
        new = GatewayConfig.model_validate(
            _config(
                upstream, {"plans": {"teams": {quiet: "paid"}}, "revenue_usd_month": {"paid": 30}}
            )
        )
        app[GATEWAY].tables.apply(new)
        ids = [await _chat(gw, quiet_key, "alice", "s1"), await _chat(gw, quiet_key, "alice", "s1"),
               await _chat(gw, loud_key, "bob", "s2")]  # fmt: skip
        db = gw.tenancy.db

        async def written() -> bool:
            async with db.engine.connect() as conn:
                n = len((await conn.execute(select(requests.c.request_id))).all())
                m = len((await conn.execute(select(spend.c.request_id))).all())
            return n == 3 and m == 3

        await wait_for(written)
        async with db.engine.connect() as conn:
            rows = {r.request_id: r for r in (await conn.execute(select(requests))).all()}
            costs = dict((await conn.execute(select(spend.c.request_id, spend.c.cost_nusd))).all())
        alice, bob = rows[ids[0]], rows[ids[2]]
        assert alice.end_user.startswith("h:") and "alice" not in alice.end_user
        assert rows[ids[1]].end_user == alice.end_user  # the same user: the same pseudonym
        assert alice.session_id.startswith("h:") and alice.conversation_id.startswith("h:")
        assert (bob.end_user, bob.session_id, bob.conversation_id) == ("bob", "s2", "c-s2")
        assert (alice.plan, bob.plan) == ("paid", "free")
        assert alice.team_id == quiet and alice.prompt_hash and alice.output_tokens > 0
        assert {i: rows[i].cost_nusd for i in ids} == {i: costs[i] for i in ids}  # as billed
        assert alice.cost_nusd > 0

        status, report = await gw.admin("GET", "/admin/insights/business")
        assert status == 200, report
        assert report["dau"][-1]["users"] == 2 and report["mau"] == 2
        assert report["plans"]["paid"]["active_users"] == 1
        assert report["plans"]["paid"]["requests"] == 2
        assert report["plans"]["paid"]["revenue_usd"] == pytest.approx(30.0)
        assert report["plans"]["free"]["requests"] == 1

        # a team admin sees its own team only
        status, own = await gw.admin("GET", "/admin/insights/business", key=admin["key"])
        assert status == 200 and own["team_id"] == loud and own["active_users"] == 1
        status, refused = await gw.admin(
            "GET", f"/admin/insights/business?team={quiet}", key=admin["key"]
        )
        assert status == 403, refused
        status, _ = await gw.admin("GET", "/admin/insights/business", key=loud_key)
        assert status == 403  # not an admin key
        for query in ("start=yesterday", "start=2026-02-01&end=2026-01-01",
                      "start=2020-01-01&end=2026-01-01"):  # fmt: skip
            status, bad = await gw.admin("GET", f"/admin/insights/business?{query}")
            assert status == 400 and bad["error"]["type"] == "invalid_request_error", bad
        status, bad = await gw.admin("GET", "/admin/insights/keys?days=-3")
        assert status == 400

        # key report, 40 days on: every key unused; the quiet key used only `tiny` of two
        async with db.engine.connect() as conn:
            later = await key_report(
                conn, now_ms=int(time.time() * 1000) + 40 * 86_400_000, days=30,
                aliases=["tiny", "other"],
            )  # fmt: skip
            now = await key_report(
                conn, now_ms=int(time.time() * 1000), days=30, aliases=["tiny", "other"]
            )
        assert len(later) == 3 and all("unused" in k["findings"] for k in later)
        by_team = {k["team_id"]: k for k in now if k["role"] == "user"}
        assert by_team[quiet]["findings"] == ["never_expires", "broader_than_used"]
        assert by_team[quiet]["suggested_aliases"] == ["tiny"]
        assert "unused" not in by_team[loud]["findings"]
        status, listed = await gw.admin("GET", "/admin/insights/keys")
        assert status == 200 and {k["id"] for k in listed["data"]} == {k["id"] for k in now}

        # the CLI reads the same routes (in a thread: it blocks)
        capsys.readouterr()
        cli = ["--url", url, "--key", MASTER]
        assert await asyncio.to_thread(cli_main, ["insights", "business", *cli]) == 0
        out = capsys.readouterr().out
        assert "MAU 2" in out and "paid" in out and "30.00" in out
        assert await asyncio.to_thread(cli_main, ["insights", "keys", *cli, "-o", "json"]) == 0
        assert {k["id"] for k in json.loads(capsys.readouterr().out)} == {k["id"] for k in now}


async def test_without_the_section_its_routes_answer_503(upstream: str, tmp_path: Path) -> None:
    app = await _gateway(upstream, tmp_path, None)
    async with served(app) as url, aiohttp.ClientSession() as session:
        gw = Gateway(url, app, session)
        status, body = await gw.admin("GET", "/admin/insights/business")
        assert status == 503 and body["error"]["code"] == "feature_disabled"
        assert "insights" not in app[GATEWAY].features.names()
