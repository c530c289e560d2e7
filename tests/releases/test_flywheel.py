"""Feedback by response id, regenerations and the flywheel export, end to end through a real
gateway (tenancy, payload logging, an output guardrail) on the simulator."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from fleetgate.cli.main import main
from fleetgate.releases.suites import load_suite
from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import MASTER, Gateway, registry_config, running_gateway, version_body


async def ask(gw: Gateway, key: str, text: str, stream: bool = False) -> tuple[str, str]:
    """(request id, response id) of one answer on ``chat``."""
    body = {"model": "chat", "messages": [{"role": "user", "content": text}],
            "max_tokens": 16, "stream": stream}  # fmt: skip
    async with gw.session.post(gw.url + "/v1/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {key}"}) as resp:  # fmt: skip
        assert resp.status == 200
        raw = await resp.read()
        rid = resp.headers["x-request-id"]
    if stream:
        first = raw.split(b"\n\n")[0]
        return rid, orjson.loads(first[first.index(b"{") :])["id"]
    return rid, orjson.loads(raw)["id"]


async def feedback(gw: Gateway, key: str, body: Any) -> tuple[int, Any]:
    async with gw.session.post(gw.url + "/v1/feedback", json=body,
                               headers={"Authorization": f"Bearer {key}"}) as resp:  # fmt: skip
        return resp.status, await resp.json()


async def until(probe: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        assert time.monotonic() < deadline, value
        await asyncio.sleep(0.05)


async def test_feedback_regenerations_and_flywheel(db_url: str, tmp_path: Path) -> None:
    async with running_sim(SimConfig(mode="echo")) as sim:
        cfg = registry_config(sim)
        cfg["tenancy"] = {"enabled": True, "spend_flush_interval_s": 0.05}
        cfg["releases"]["rollout"] = {"flush_s": 0.1}
        cfg["safety"] = {"checks": {"words": {"type": "words"}},
                         "policies": {"default": {"output": ["words"]}}}  # fmt: skip
        async with running_gateway(cfg, tmp_path, db_url) as gw:
            await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
            await gw.admin("POST", "/admin/registry/models/chat/versions",
                           json=version_body(sim, 1))  # fmt: skip
            status, _ = await gw.admin("POST", "/admin/registry/models/chat/promote",
                                       json={"stage": "production", "version": "v1"})  # fmt: skip
            assert status == 200
            keys = {}
            for team, logs in (("loud", True), ("quiet", False)):
                _, t = await gw.admin("POST", "/admin/teams",
                                      json={"name": team, "log_payloads": logs})  # fmt: skip
                _, k = await gw.admin("POST", "/admin/keys", json={"team": t["id"]})
                keys[team] = k["key"]
            loud, quiet = keys["loud"], keys["quiet"]

            bad_rid, bad_resp = await ask(gw, loud, "capital of Italy please")
            again = [await ask(gw, loud, "tell me a joke") for _ in range(2)]  # a regeneration
            blocked_rid, _ = await ask(gw, loud, "explain the pipe bomb")  # output blocked
            _, stream_resp = await ask(gw, loud, "a streamed answer", stream=True)
            quiet_rid, _ = await ask(gw, quiet, "a quiet question")

            # response ids resolve once the gateway recorded them (within a flush)
            async def by_response() -> Any:
                status, body = await feedback(
                    gw, loud, {"response_id": bad_resp, "rating": "down", "comment": "too long"}
                )
                return body if status == 201 else None

            body = await until(by_response)
            assert body["request_id"] == bad_rid and body["response_id"] == bad_resp
            assert body["request"]["alias"] == "chat" and body["request"]["version"] == "v1"

            async def by_stream_response() -> Any:  # a streamed answer's id is known too
                status, body = await feedback(
                    gw, loud, {"response_id": stream_resp, "rating": "up"}
                )
                return body if status == 201 else None

            # the streamed answer's record is written when its stream ends, possibly a batch later
            assert (await until(by_stream_response))["response_id"] == stream_resp
            status, body = await feedback(gw, loud, {"response_id": "chatcmpl-nope", "score": 0})
            assert status == 404 and body["error"]["param"] == "response_id"
            status, body = await feedback(gw, loud, {"rating": "up"})
            assert status == 400 and body["error"]["param"] == "request_id"
            both = {"request_id": bad_rid, "response_id": bad_resp, "rating": "up"}
            assert (await feedback(gw, loud, both))[0] == 400
            for rid, key in ((blocked_rid, loud), (quiet_rid, quiet)):

                async def by_request(rid: str = rid, key: str = key) -> Any:
                    # taken once the answer's record is in the store (a batch later)
                    status, _ = await feedback(gw, key, {"request_id": rid, "rating": "down"})
                    return status == 201

                await until(by_request)

            async def quality() -> Any:
                _, body = await gw.admin("GET", "/admin/registry/quality?alias=chat")
                rows = body["data"]
                return rows if rows and rows[0]["requests"] == 6 else None

            (row,) = await until(quality)
            assert (row["version"], row["feedback"], row["negative"]) == ("v1", 4, 3)
            assert row["regenerations"] == 1 and row["implicit_negative_rate"] == 4 / 5

            async def flywheel() -> Any:  # the audit rows are written in batches too
                _, body = await gw.admin("GET", "/admin/registry/flywheel?alias=chat")
                done = len(body["data"]) == 2 and sum(body["skipped"].values()) == 2
                return body if done else None

            body = await until(flywheel)
            assert body["skipped"] == {"blocked": 1, "no_payload": 1}, body
            items = {i["source"]["reason"]: i for i in body["data"]}
            fb, regen = items["feedback"], items["regeneration"]
            assert fb["id"] == f"fb-{bad_rid}" and fb["comment"] == "too long"
            assert fb["messages"][0]["content"] == "capital of Italy please"
            assert "Italy" in fb["rejected"] and fb["source"]["response_id"] == bad_resp
            assert regen["id"] == f"fb-{again[0][0]}" and regen["kind"] == "fix"
            assert not any("pipe bomb" in orjson.dumps(i).decode() for i in body["data"])
            status, _ = await gw.admin("GET", "/admin/registry/flywheel?limit=0")
            assert status == 400

            out = tmp_path / "fix.jsonl"
            argv = ["flywheel", "export", "--alias", "chat", "--since", "1d", "--out", str(out),
                    "--url", gw.url, "--key", MASTER]  # fmt: skip
            assert await asyncio.to_thread(main, argv) == 0
            suite = load_suite(out)  # the export is a suite the eval runner takes
            assert {i.id for i in suite.items} == {fb["id"], regen["id"]}
            assert all(i.how == "judge" and i.rejected for i in suite.items)
