"""A rollout across three real gateway processes sharing PostgreSQL: a candidate failing 10% of
its attempts is rolled back by whichever replica drives it, and no replica sends it a request a
second after the decision, with no client request failed; once fixed, a new rollout reaches
100% and production, and one rollback call restores v1 on all three within a second."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp

from tests.procs import serve_processes, sim_process

MASTER = "sk-rollout-replicas"
AUTH = {"Authorization": f"Bearer {MASTER}"}


async def admin(s: aiohttp.ClientSession, base: str, method: str, path: str,
                body: Any = None) -> tuple[int, Any]:  # fmt: skip
    async with s.request(method, base + path, json=body, headers=AUTH) as resp:
        return resp.status, await resp.json(content_type=None)


async def until_status(s: aiohttp.ClientSession, base: str, want: set[str],
                       timeout: float = 60.0) -> Any:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = await admin(s, base, "GET", "/admin/registry/rollouts/chat")
        assert status == 200, body
        if body["status"] in want:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"rollout still {body['status']}: {body['decisions'][-3:]}")


class Load:
    """Four clients round-robin over the replicas: (sent, replica, status, deployment)."""

    def __init__(self, s: aiohttp.ClientSession, replicas: list[str]) -> None:
        self.s, self.replicas = s, replicas
        self.answers: list[tuple[float, int, int, str]] = []
        self.stop = asyncio.Event()

    async def client(self, n: int) -> None:
        i = n
        while not self.stop.is_set():
            r = i % len(self.replicas)
            body = {"model": "chat", "max_tokens": 2,
                    "messages": [{"role": "user", "content": f"request {n}-{i}"}]}  # fmt: skip
            i += 1
            sent = time.monotonic()
            async with self.s.post(self.replicas[r] + "/v1/chat/completions", json=body,
                                   headers=AUTH) as resp:  # fmt: skip
                raw = await resp.read()
                dep = resp.headers.get("x-fleetgate-deployment", raw.decode()[:200])
                self.answers.append((sent, r, resp.status, dep))

    async def during(self, work: Any) -> Any:
        tasks = [asyncio.create_task(self.client(n)) for n in range(4)]
        try:
            return await work
        finally:
            self.stop.set()
            await asyncio.gather(*tasks)
            self.stop.clear()


async def test_three_replicas_roll_back_and_promote(tmp_path: Path, shared_pg_url: str) -> None:
    with ExitStack() as stack:
        v1 = stack.enter_context(sim_process("--model", "tiny"))
        v2 = stack.enter_context(sim_process("--model", "tiny", "--error-rate", "0.1"))
        config = {
            "models": [{"alias": "chat", "registry": {"model": "chat", "stage": "production"}}],
            "tenancy": {"enabled": False},
            "router": {"num_retries": 4, "retry_backoff_s": 0.0},
            "health": {"allowed_fails": 1000, "probe_interval_s": 30},
            "releases": {"poll_interval_s": 0.2,
                         "rollout": {"tick_s": 0.2, "lease_s": 1.0, "flush_s": 0.2,
                                     "max_latency_ratio": 2.0, "max_ttft_ratio": 2.0}},
        }  # fmt: skip
        env = {"FLEETGATE_DATABASE_URL": shared_pg_url}
        replicas = stack.enter_context(
            serve_processes(3, config, tmp_path, master_key=MASTER, env=env)
        )
        async with aiohttp.ClientSession() as s:
            a = replicas[0]
            assert (await admin(s, a, "POST", "/admin/registry/models", {"name": "chat"}))[0] == 201
            for n, url in ((1, v1), (2, v2)):
                body = {"artifact_uri": f"s3://chat/{n}", "deployments": [
                    {"model": "tiny", "api_base": url, "name": f"chat-v{n}"}]}  # fmt: skip
                status, got = await admin(
                    s, a, "POST", "/admin/registry/models/chat/versions", body
                )
                assert status == 201, got
            promote = {"stage": "production", "version": "v1"}
            assert (await admin(s, a, "POST", "/admin/registry/models/chat/promote", promote))[
                0
            ] == 200
            start = {"alias": "chat", "to": "v2", "steps": [50, 100], "interval_s": 1.0,
                     "min_samples": 100}  # fmt: skip
            await asyncio.sleep(1.0)  # every replica follows production = v1

            load = Load(s, replicas)

            async def roll_back() -> tuple[Any, float]:
                status, got = await admin(s, replicas[1], "POST", "/admin/registry/rollouts", start)
                assert status == 201, got
                rolled = await until_status(s, replicas[2], {"rolled_back", "completed"})
                decided = time.monotonic()
                # keep the load on until every replica has answered requests sent more than a
                # second after the decision (at least 1.5 s of them; bounded by 20 s)
                while time.monotonic() < decided + 20.0:
                    await asyncio.sleep(0.25)
                    late = {r for sent, r, _, _ in load.answers if sent > decided + 1.0}
                    if time.monotonic() > decided + 2.5 and late == {0, 1, 2}:
                        break
                return rolled, decided

            rolled, decided = await load.during(roll_back())
            assert rolled["status"] == "rolled_back" and "error rate" in rolled["reason"], rolled
            answers = load.answers
            assert any(dep == "chat-v2" for *_, dep in answers)
            late = [(r, dep) for sent, r, _, dep in answers if sent > decided + 1.0]
            assert {r for r, _ in late} == {0, 1, 2}  # every replica served after it
            assert all(dep == "chat-v1" for _, dep in late), late
            assert not [x for x in answers if x[2] != 200]  # no client saw a failure

            # v2 fixed: the sim stops failing; a new rollout goes all the way
            req = urllib.request.Request(v2.removesuffix("/v1") + "/sim/faults", method="POST",
                                         data=json.dumps({"error_rate": 0.0}).encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            await asyncio.to_thread(lambda: urllib.request.urlopen(req, timeout=5).read())
            load = Load(s, replicas)

            async def complete() -> Any:
                status, got = await admin(s, replicas[2], "POST", "/admin/registry/rollouts", start)
                assert status == 201, got
                return await until_status(s, replicas[0], {"rolled_back", "completed"})

            done = await load.during(complete())
            assert done["status"] == "completed", [d["reason"] for d in done["decisions"]]
            assert not [x for x in load.answers if x[2] != 200]
            _, model = await admin(s, a, "GET", "/admin/registry/models/chat")
            assert (model["stages"]["production"], model["stages"]["previous"]) == ("v2", "v1")

            # one rollback call: all three replicas serve v1 again within a second
            assert (await admin(s, replicas[1], "POST", "/admin/registry/models/chat/rollback",
                                {}))[0] == 200  # fmt: skip
            started = time.monotonic()
            for base in replicas:
                while True:
                    body = {"model": "chat", "max_tokens": 2,
                            "messages": [{"role": "user", "content": "which?"}]}  # fmt: skip
                    async with s.post(base + "/v1/chat/completions", json=body,
                                      headers=AUTH) as resp:  # fmt: skip
                        if resp.headers.get("x-fleetgate-deployment") == "chat-v1":
                            break
                    assert time.monotonic() - started < 1.0
                    await asyncio.sleep(0.02)
