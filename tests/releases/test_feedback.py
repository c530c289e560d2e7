"""``POST /v1/feedback`` and the quality view: feedback tied to the request's alias, version
and team through its spend record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import Gateway, registry_config, running_gateway


async def ask(gw: Gateway, key: str) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with gw.session.post(gw.url + "/v1/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {key}"}) as resp:  # fmt: skip
        assert resp.status == 200
        return resp.headers["x-request-id"]


async def feedback(gw: Gateway, key: str, body: Any) -> tuple[int, Any]:
    async with gw.session.post(gw.url + "/v1/feedback", json=body,
                               headers={"Authorization": f"Bearer {key}"}) as resp:  # fmt: skip
        return resp.status, await resp.json()


async def test_feedback_by_alias_and_version(db_url: str, tmp_path: Path) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        cfg = registry_config(sim)
        cfg["tenancy"] = {"enabled": True, "spend_flush_interval_s": 0.05}
        async with running_gateway(cfg, tmp_path, db_url) as gw:
            keys = []
            for team in ("search", "ads"):
                _, t = await gw.admin("POST", "/admin/teams", json={"name": team})
                status, k = await gw.admin("POST", "/admin/keys", json={"team": t["id"]})
                assert status == 201
                keys.append(k["key"])
            search, ads = keys
            rids = [await ask(gw, search) for _ in range(3)]
            assert (await feedback(gw, search, {"request_id": rids[0], "rating": "down"}))[0] == 201
            good = {"request_id": rids[1], "score": 0.9, "comment": "good", "tags": ["tone"]}
            status, body = await feedback(gw, search, good)
            assert status == 201 and body["score"] == 0.9 and body["team_id"] is not None
            # a changed mind replaces the verdict; another team's feedback does not count
            assert (await feedback(gw, search, {"request_id": rids[1], "rating": "up"}))[0] == 201
            assert (await feedback(gw, ads, {"request_id": rids[2], "rating": "down"}))[0] == 201
            for bad, param in [
                ({"request_id": rids[0]}, None),
                ({"request_id": rids[0], "rating": "meh"}, "rating"),
                ({"request_id": rids[0], "score": 2}, "score"),
                ({"request_id": rids[0], "rating": "up", "score": 1}, None),
                ({"rating": "up"}, "request_id"),
                ({"request_id": rids[0], "rating": "up", "x": 1}, "x"),
            ]:
                status, body = await feedback(gw, search, bad)
                assert status == 400 and body["error"]["type"] == "invalid_request_error", bad
                assert param is None or body["error"]["param"] == param, body
            assert (await feedback(gw, "sk-nobody", {"request_id": "r", "rating": "up"}))[0] == 401

            async def quality() -> list[dict[str, Any]]:
                status, body = await gw.admin("GET", "/admin/registry/quality?alias=tiny")
                assert status == 200
                return body["data"]  # type: ignore[no-any-return]

            for _ in range(100):  # spend records are written in batches
                rows = await quality()
                if rows and rows[0]["requests"] == 3:
                    break
                await asyncio.sleep(0.05)
            assert rows == [{"alias": "tiny", "version": "v1", "requests": 3, "feedback": 2,
                             "negative": 1, "negative_rate": 0.5, "mean_score": 0.5,
                             "regenerations": 0, "implicit_negative_rate": 0.5}]  # fmt: skip
            status, body = await gw.admin("GET", "/admin/registry/quality?window_s=x")
            assert status == 400
            status, _ = await gw.admin("GET", "/admin/registry/quality", key=search)
            assert status == 403
