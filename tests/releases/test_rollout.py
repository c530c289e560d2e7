"""Progressive rollouts end to end: two replicas sharing the database, simulated versions, a
client sending traffic throughout. A slow candidate, and one that fails 10% of its requests,
are rolled back automatically and every replica stops sending them traffic within a second,
with no failed client request; a healthy one reaches 100% and becomes production."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetgate.sim.config import FaultConfig, SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import Gateway, registry_config, running_gateway, version_body

PROMPT = "Please summarise the quarterly report for the northern region in two lines. " * 2
# the engines' prefill cost per prompt token (PROMPT is ~60 tokens): a request takes tens of
# milliseconds, so the rollouts collect their samples in a few seconds; the healthy candidate's
# latency limit is at least the baseline's p95 plus the 50 ms floor, well over a loaded
# machine's scheduling hiccups
PREFILL_MS = 0.5


@dataclass
class Traffic:
    """Requests sent round-robin through the replicas until stopped."""

    replicas: list[Gateway]
    key: str
    answers: list[tuple[float, int, str]] = field(default_factory=list)  # (sent, status, dep)

    async def client(self, n: int, stop: asyncio.Event) -> None:
        i = n
        while not stop.is_set():
            # a new prompt each time: the engines' prefix caches (warm on the baseline, cold on
            # the candidate) would otherwise decide the latency comparison
            content = f"request {n}-{i}: {PROMPT}"
            body = {"model": "chat", "messages": [{"role": "user", "content": content}],
                    "max_tokens": 2}  # fmt: skip
            gw = self.replicas[i % len(self.replicas)]
            i += 1
            sent = time.monotonic()
            async with gw.session.post(
                gw.url + "/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {self.key}"},
            ) as resp:
                raw = await resp.read()
                dep = resp.headers.get("x-fleetgate-deployment", "")
                if resp.status != 200:
                    dep = raw.decode()[:300]
                self.answers.append((sent, resp.status, dep))  # fmt: skip


@asynccontextmanager
async def traffic(replicas: list[Gateway], key: str) -> AsyncIterator[Traffic]:
    t = Traffic(replicas, key)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(t.client(n, stop)) for n in range(4)]
    try:
        yield t
    finally:
        stop.set()
        await asyncio.gather(*tasks)


@asynccontextmanager
async def fleet(
    tmp_path: Path, db_url: str, v2: SimConfig, router: dict[str, Any] | None = None
) -> AsyncIterator[tuple[list[Gateway], str]]:
    async with AsyncExitStack() as stack:
        v1_url = await stack.enter_async_context(
            running_sim(
                SimConfig(mode="echo", prefill_ms_per_token=PREFILL_MS, decode_ms_per_step=1.0)
            )
        )
        v2_url = await stack.enter_async_context(running_sim(v2))
        cfg = registry_config(v1_url)
        cfg["tenancy"] = {"enabled": True, "spend_flush_interval_s": 0.05, "poll_interval_s": 0.2}
        cfg["releases"]["rollout"] = {"tick_s": 0.2, "lease_s": 1.0, "max_latency_ratio": 2.0,
                                      "max_ttft_ratio": 2.0, "flush_s": 0.2}  # fmt: skip
        # retries absorb the failing candidate's errors (clients see none); the analysis still
        # counts every failed attempt
        cfg["router"] = router or {"num_retries": 4, "retry_backoff_s": 0.0}
        cfg["health"]["allowed_fails"] = 1000
        replicas = [
            await stack.enter_async_context(running_gateway(cfg, tmp_path / n, db_url))
            for n in ("a", "b")
        ]
        a = replicas[0]
        await a.admin("POST", "/admin/registry/models", json={"name": "chat"})
        for n, url in ((1, v1_url), (2, v2_url)):
            await a.admin("POST", "/admin/registry/models/chat/versions", json=version_body(url, n))
        status, _ = await a.admin("POST", "/admin/registry/models/chat/promote",
                                  json={"stage": "production", "version": "v1"})  # fmt: skip
        assert status == 200
        _, team = await a.admin("POST", "/admin/teams", json={"name": "load"})
        _, key = await a.admin("POST", "/admin/keys", json={"team": team["id"]})
        for gw in replicas:  # the key reaches the other replica's cache within a poll
            deadline = time.monotonic() + 5
            while (await gw.admin("GET", "/v1/models", key=key["key"]))[0] != 200:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            while (await gw.chat())[1] != "chat-v1":  # and the promotion of v1 reached it
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        yield replicas, key["key"]


async def until_status(gw: Gateway, want: set[str], timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = await gw.admin("GET", "/admin/registry/rollouts/chat")
        assert status == 200, body
        if body["status"] in want:
            return body  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError(f"rollout still {body['status']}: {body['decisions'][-3:]}")


START = {"alias": "chat", "to": "v2", "steps": [50, 100], "interval_s": 1.0, "min_samples": 30}


async def test_a_slow_candidate_is_rolled_back_everywhere(db_url: str, tmp_path: Path) -> None:
    # 3x the baseline's prefill and 400 ms more before the first token: the gateways' own time,
    # which grows on a loaded machine and adds to both sides, must not bring the candidate
    # under 2x the baseline (with prefill alone it did once in CI: the rollout completed)
    slow = SimConfig(mode="echo", prefill_ms_per_token=3 * PREFILL_MS, decode_ms_per_step=1.0,
                     faults=FaultConfig(spike_rate=1.0, spike_ms=400.0))  # fmt: skip
    async with fleet(tmp_path, db_url, slow) as (replicas, key):
        a, b = replicas
        async with traffic(replicas, key) as load:
            status, body = await a.admin("POST", "/admin/registry/rollouts", json=START)
            assert status == 201 and body["percent"] == 50, body
            rolled = await until_status(b, {"rolled_back", "completed"})
            decided = time.monotonic()
            assert rolled["status"] == "rolled_back", rolled
            assert "latency p95" in rolled["reason"]
            await asyncio.sleep(2.0)
        assert any(dep == "chat-v2" for _, _, dep in load.answers)  # it did get traffic
        late = [dep for sent, _, dep in load.answers if sent > decided + 1.0]
        assert late and "chat-v2" not in late  # no replica sends to v2 a second later
        failed = [(status, dep) for _, status, dep in load.answers if status != 200]
        assert not failed  # nobody saw a failure
        alerts = [f.alerts.sent for f in (a.releases, b.releases)]
        assert [e["event"] for e in alerts[0] + alerts[1]].count("rollout.rolled_back") == 1
        _, model = await a.admin("GET", "/admin/registry/models/chat")
        assert model["stages"]["production"] == "v1"
        # a second rollout may start once this one is over; an active one blocks a third
        assert (await a.admin("POST", "/admin/registry/rollouts", json=START))[0] == 201
        status, body = await b.admin("POST", "/admin/registry/rollouts", json=START)
        assert status == 409 and body["error"]["code"] == "rollout_active"
        status, body = await b.admin("POST", "/admin/registry/rollouts/chat/abort")
        assert status == 200 and body["status"] == "aborted" and body["percent"] == 0


async def test_a_candidate_failing_10_percent_is_rolled_back(db_url: str, tmp_path: Path) -> None:
    flaky = SimConfig(mode="echo", prefill_ms_per_token=PREFILL_MS, decode_ms_per_step=1.0,
                      faults=FaultConfig(error_rate=0.10, error_status=500))  # fmt: skip
    async with fleet(tmp_path, db_url, flaky) as (replicas, key):
        a, b = replicas
        async with traffic(replicas, key) as load:
            # 100 samples: a 10% failure rate shows as more than 2% all but ~0.2% of the time
            start = {**START, "min_samples": 100}
            status, body = await a.admin("POST", "/admin/registry/rollouts", json=start)
            assert status == 201, body
            rolled = await until_status(b, {"rolled_back", "completed"})
            decided = time.monotonic()
            assert rolled["status"] == "rolled_back", rolled
            assert "error rate" in rolled["reason"] and "latency" not in rolled["reason"]
            last = rolled["decisions"][-1]
            assert last["verdict"] == "fail" and last["candidate"]["failed_attempts"] > 0
            assert 0.02 < last["candidate"]["error_rate"] < 0.3, last
            assert last["baseline"]["error_rate"] == 0, last
            await asyncio.sleep(2.0)
        assert any(dep == "chat-v2" for _, _, dep in load.answers)
        late = [dep for sent, _, dep in load.answers if sent > decided + 1.0]
        assert late and "chat-v2" not in late
        failed = [(status, dep) for _, status, dep in load.answers if status != 200]
        assert not failed, failed
        _, model = await a.admin("GET", "/admin/registry/models/chat")
        assert model["stages"]["production"] == "v1"


async def test_a_healthy_candidate_reaches_production(db_url: str, tmp_path: Path) -> None:
    same = SimConfig(mode="echo", prefill_ms_per_token=PREFILL_MS, decode_ms_per_step=1.0)
    async with fleet(tmp_path, db_url, same) as (replicas, key):
        a, b = replicas
        async with traffic(replicas, key) as load:
            # 60 samples a side: a p95 of 30 is the second slowest request, which one scheduling
            # hiccup of a loaded test machine can double
            status, _ = await a.admin("POST", "/admin/registry/rollouts",
                                      json={**START, "min_samples": 60})  # fmt: skip
            assert status == 201
            status, paused = await b.admin("POST", "/admin/registry/rollouts/chat/pause")
            assert status == 200 and paused["status"] == "paused"
            assert (await b.admin("POST", "/admin/registry/rollouts/chat/pause"))[0] == 409
            await asyncio.sleep(1.5)
            assert (await a.admin("GET", "/admin/registry/rollouts/chat"))[1]["step"] == 0
            assert (await a.admin("POST", "/admin/registry/rollouts/chat/resume"))[0] == 200
            done = await until_status(a, {"completed", "rolled_back", "aborted"})
            assert done["status"] == "completed", [d["reason"] for d in done["decisions"]][-2:]
            verdicts = [d["verdict"] for d in done["decisions"]]
            assert verdicts.count("pass") == 2 and "fail" not in verdicts, verdicts
        failed = [(status, dep) for _, status, dep in load.answers if status != 200]
        assert not failed, failed
        _, model = await a.admin("GET", "/admin/registry/models/chat")
        assert (model["stages"]["production"], model["stages"]["previous"]) == ("v2", "v1")
        status, body = await a.admin("POST", "/admin/registry/models/chat/rollback")
        assert status == 200
        for gw in replicas:
            deadline = time.monotonic() + 1.0
            while (await gw.chat())[1] != "chat-v1":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)


async def test_retries_of_a_failing_candidate_go_to_the_baseline(
    db_url: str, tmp_path: Path
) -> None:
    """Half the candidate's attempts fail; with the default retries every client request is
    answered (a retry goes to the baseline, not to the candidate again), and the analysis
    still counts each failed attempt against the candidate."""
    broken = SimConfig(mode="echo", prefill_ms_per_token=PREFILL_MS, decode_ms_per_step=1.0,
                       faults=FaultConfig(error_rate=0.5, error_status=500))  # fmt: skip
    router = {"retry_backoff_s": 0.0}  # the default number of retries
    async with fleet(tmp_path, db_url, broken, router) as (replicas, key):
        a, b = replicas
        start = {**START, "min_samples": 100_000, "interval_s": 0.5}  # judged, never decided
        status, body = await a.admin("POST", "/admin/registry/rollouts", json=start)
        assert status == 201, body
        # The analysis counts the 2-second buckets that begin after the step began (not the
        # first, partial one), so the traffic runs until the candidate itself has answered 30
        # requests sent 2 s or more after it: its attempts fail half the time, so about as
        # many failed attempts are in the window.
        counted_from = time.monotonic() + 2.0
        async with traffic(replicas, key) as load:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (
                len(load.answers) < 120 or _served_by(load, "chat-v2", counted_from) < 30
            ):
                await asyncio.sleep(0.1)
        ended_ms = int(time.time() * 1000)
        failed = [(status, dep) for _, status, dep in load.answers if status != 200]
        assert len(load.answers) >= 120 and not failed, failed
        assert _served_by(load, "chat-v2", counted_from) >= 30
        assert {"chat-v1", "chat-v2"} <= {dep for _, _, dep in load.answers}
        # a decision on every attempt: judged after the replicas' flushes (0.2 s) wrote them
        body = await until_decided(a, after_ms=ended_ms + 500)
        candidate, baseline = body["decisions"][-1]["candidate"], body["decisions"][-1]["baseline"]
        assert candidate["failed_attempts"] > 10, candidate  # counted where they failed
        assert baseline["failed_attempts"] == 0, baseline
        assert 0.3 < candidate["error_rate"] < 0.7, candidate


def _served_by(load: Traffic, deployment: str, sent_after: float) -> int:
    return sum(
        1 for sent, status, dep in load.answers
        if status == 200 and dep == deployment and sent >= sent_after
    )  # fmt: skip


async def until_decided(gw: Gateway, after_ms: int, timeout: float = 10.0) -> dict[str, Any]:
    """The rollout once its latest decision was taken at ``after_ms`` (wall clock) or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, body = await gw.admin("GET", "/admin/registry/rollouts/chat")
        if body["decisions"] and body["decisions"][-1]["at_ms"] >= after_ms:
            return body  # type: ignore[no-any-return]
        await asyncio.sleep(0.1)
    raise AssertionError("no decision recorded")
