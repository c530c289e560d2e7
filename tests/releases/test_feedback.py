"""``POST /v1/feedback`` and the quality view: feedback tied to the request's alias, version
and team through its spend record."""

from __future__ import annotations

import asyncio
import time
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


async def recorded(gw: Gateway, key: str, body: Any, timeout: float = 10.0) -> tuple[int, Any]:
    """Feedback on an answer served to ``key``, once its record is in the store (records are
    written in batches, a second or two after the answer; until then the answer is 404)."""
    deadline = time.monotonic() + timeout
    while True:
        status, out = await feedback(gw, key, body)
        if status != 404 or time.monotonic() > deadline:
            return status, out
        await asyncio.sleep(0.05)


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
            down = {"request_id": rids[0], "rating": "down"}
            assert (await recorded(gw, search, down))[0] == 201
            good = {"request_id": rids[1], "score": 0.9, "comment": "good", "tags": ["tone"]}
            status, body = await recorded(gw, search, good)
            assert status == 201 and body["score"] == 0.9 and body["team_id"] is not None
            # a changed mind replaces the verdict
            assert (await feedback(gw, search, {"request_id": rids[1], "rating": "up"}))[0] == 201
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
            # every answer is recorded now: another team's verdict is refused, and not counted
            status, body = await feedback(gw, ads, {"request_id": rids[2], "rating": "down"})
            assert status == 404, body
            rows = await quality()
            assert rows == [{"alias": "tiny", "version": "v1", "requests": 3, "feedback": 2,
                             "negative": 1, "negative_rate": 0.5, "mean_score": 0.5,
                             "regenerations": 0, "implicit_negative_rate": 0.5}]  # fmt: skip
            status, body = await gw.admin("GET", "/admin/registry/quality?window_s=x")
            assert status == 400
            status, _ = await gw.admin("GET", "/admin/registry/quality", key=search)
            assert status == 403


async def _team(gw: Gateway, name: str) -> tuple[str, str]:
    status, team = await gw.admin("POST", "/admin/teams", json={"name": name})
    assert status == 201, team
    status, key = await gw.admin("POST", "/admin/keys", json={"team": team["id"]})
    assert status == 201, key
    return team["id"], key["key"]


async def _key(gw: Gateway, **fields: Any) -> str:
    status, key = await gw.admin("POST", "/admin/keys", json=fields)
    assert status == 201, key
    return str(key["key"])


def _neighbour(rid: str) -> str:
    """The id a counter would have issued next."""
    return f"{int(rid, 16) + 1:0{len(rid)}x}"


async def test_feedback_is_taken_only_on_answers_served_to_the_caller(
    db_url: str, tmp_path: Path
) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        cfg = registry_config(sim)
        cfg["tenancy"] = {"enabled": True, "spend_flush_interval_s": 0.05}
        async with running_gateway(cfg, tmp_path, db_url) as gw:
            search_id, search = await _team(gw, "search")
            ads_id, ads = await _team(gw, "ads")
            teammate = await _key(gw, team=search_id)
            admin = await _key(gw, team=search_id, role="team_admin")
            _, user = await gw.admin("POST", "/admin/users", json={"team": search_id, "name": "u"})
            phone, laptop = [await _key(gw, team=search_id, user=user["id"]) for _ in range(2)]

            rid = await ask(gw, search)
            status, mine = await recorded(gw, search, {"request_id": rid, "rating": "up"})
            assert status == 201 and mine["request"]["team_id"] == search_id

            nowhere = {"request_id": "0" * len(rid), "rating": "down"}
            status, unknown = await feedback(gw, ads, nowhere)
            assert status == 404 and unknown["error"]["param"] == "request_id"
            for key in (ads, teammate):  # another team's answer, another key's of the team
                status, body = await feedback(gw, key, {"request_id": rid, "rating": "down"})
                assert status == 404, body
                # the same answer as for an id never issued: nothing about the answer leaks
                assert body["error"]["message"].replace(rid, "X") == unknown["error"][
                    "message"
                ].replace("0" * len(rid), "X")
                assert search_id not in str(body) and "tiny" not in str(body)
            for issued_next in (_neighbour(rid), _neighbour(await ask(gw, ads))):
                status, body = await feedback(gw, ads, {"request_id": issued_next, "score": 0})
                assert status == 404, body  # not issued (yet): no verdict stored on it

            status, body = await feedback(gw, admin, {"request_id": rid, "rating": "down"})
            assert status == 201 and body["request"]["alias"] == "tiny"  # its team's answers
            on_phone = await ask(gw, phone)
            status, body = await recorded(gw, laptop, {"request_id": on_phone, "score": 0.2})
            assert status == 201  # another key of the same user

            async def quality() -> list[dict[str, Any]]:
                _, body = await gw.admin("GET", "/admin/registry/quality?alias=tiny")
                return body["data"]  # type: ignore[no-any-return]

            assert [r["feedback"] for r in await quality()] == [3]  # nothing refused counted


async def test_feedback_reaches_an_answer_served_by_another_replica(
    db_url: str, tmp_path: Path
) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        cfg = registry_config(sim)
        cfg["tenancy"] = {"enabled": True, "spend_flush_interval_s": 0.05, "poll_interval_s": 0.1}
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        async with (
            running_gateway(cfg, tmp_path / "a", db_url) as gw_a,
            running_gateway(cfg, tmp_path / "b", db_url) as gw_b,
        ):
            _, search = await _team(gw_a, "search")
            _, ads = await _team(gw_a, "ads")

            async def knows_keys() -> bool:  # replica b loads the keys from the store
                for key in (search, ads):
                    status, _ = await feedback(gw_b, key, {"request_id": "0", "rating": "up"})
                    if status != 404:  # 401 until it has them
                        return False
                return True

            for _ in range(100):
                if await knows_keys():
                    break
                await asyncio.sleep(0.05)
            assert await knows_keys()
            rid = await ask(gw_a, search)
            status, body = await recorded(gw_b, search, {"request_id": rid, "rating": "up"})
            assert status == 201, body
            assert body["request_id"] == rid and body["request"]["alias"] == "tiny"
            status, body = await feedback(gw_b, ads, {"request_id": rid, "rating": "down"})
            assert status == 404, body
