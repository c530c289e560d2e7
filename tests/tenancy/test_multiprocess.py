"""Real ``fleetgate serve`` processes sharing Redis and PostgreSQL (through a cuttable proxy).

Three gateways, one 120 RPM key: exactly 120 of 600 requests succeed. 10,000 requests across
teams with PostgreSQL unreachable for 20 s in the middle: none fails, the report equals the
independent sum to the cent. A gateway killed with SIGKILL: its spool is replayed once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from sqlalchemy import select

from fleetgate.app import MIGRATIONS
from fleetgate.store import Database
from fleetgate.tenancy.tables import spend
from tests.tenancy.support import (
    MASTER,
    PRICE,
    REDIS_URL,
    TcpProxy,
    create_pg_database,
    drop_pg_database,
    free_port,
)
from tests.tenancy.test_spend import _independent_cost

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass
class Cluster:
    tmp: Path
    env: dict[str, str]
    config: Path
    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, i: int) -> None:
        cmd = [sys.executable, "-m", "fleetgate.cli.main", "--log-level", "WARNING", "serve",
               "--config", str(self.config), "--port", str(self.ports[i]),
               "--data-dir", str(self.tmp / f"gw{i}"), "--no-watch"]  # fmt: skip
        log = open(self.tmp / f"gw{i}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=log)
        log.close()
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"


async def _wait_live(
    session: aiohttp.ClientSession, url: str, proc: Any, path: str = "/health/live"
) -> None:
    for _ in range(300):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{url} exited with {proc.returncode}")
        try:
            async with session.get(url + path) as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never came up")


@pytest.fixture
async def cluster(
    tmp_path: Path, redis_prefix: str
) -> AsyncIterator[tuple[Cluster, TcpProxy, str]]:
    db_url = await create_pg_database()
    proxy = TcpProxy(5432)
    await proxy.start()
    sim_port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC), "FLEETGATE_MASTER_KEY": MASTER,
           "FLEETGATE_REDIS_URL": REDIS_URL,
           "FLEETGATE_DATABASE_URL": db_url.replace(":5432/", f":{proxy.port}/")}  # fmt: skip
    sim = subprocess.Popen(
        [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(sim_port),
         "--output-len", "12"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    config = tmp_path / "fleetgate.yaml"
    config.write_text(yaml.safe_dump({
        "models": [{"alias": "tiny", "deployments": [{
            "provider": "openai", "model": "tiny", "api_base": f"http://127.0.0.1:{sim_port}/v1",
            "price": PRICE}]}],
        "health": {"probe_interval_s": 30},
        "server": {"access_log": False},
        "tenancy": {"redis_prefix": redis_prefix, "spend_flush_interval_s": 0.1},
    }))  # fmt: skip
    c = Cluster(tmp_path, env, config, [free_port() for _ in range(3)])
    try:
        async with aiohttp.ClientSession() as session:
            await _wait_live(session, f"http://127.0.0.1:{sim_port}", sim, "/v1/models")
            c.start(0)  # one migrates first; the others find the schema in place
            await _wait_live(session, c.url(0), c.procs[0])
            c.start(1)
            c.start(2)
            for i in (1, 2):
                await _wait_live(session, c.url(i), c.procs[i])
        yield c, proxy, db_url
    finally:
        for p in [*c.procs, sim]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*c.procs, sim]:
            try:
                # off the event loop: the gateways reach PostgreSQL through `proxy`, which
                # this loop serves; a blocking wait here stopped their shutdown's last writes
                # (a gateway waited out the whole 15 s in every run)
                await asyncio.to_thread(p.wait, 15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        await proxy.close()
        await drop_pg_database(db_url)


async def _post(
    session: aiohttp.ClientSession, url: str, path: str, body: Any, key: str = MASTER,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:  # fmt: skip
    h = {"Authorization": f"Bearer {key}", **(headers or {})}
    async with session.post(url + path, json=body, headers=h) as resp:
        return resp.status, await resp.json()


async def _key(session: aiohttp.ClientSession, c: Cluster, team: str, **fields: Any) -> str:
    status, t = await _post(session, c.url(0), "/admin/teams", {"name": team})
    assert status == 201, t
    status, k = await _post(session, c.url(0), "/admin/keys", {"team": t["id"], **fields})
    assert status == 201, k
    # every replica has it, usually within a second (listing the models spends no request or
    # token of its limits)
    deadline = asyncio.get_running_loop().time() + 10.0
    for i in range(len(c.ports)):
        headers = {"Authorization": f"Bearer {k['key']}"}
        while True:
            async with session.get(c.url(i) + "/v1/models", headers=headers) as resp:
                if resp.status == 200:
                    break
            assert asyncio.get_running_loop().time() < deadline, f"{c.url(i)} lacks the key"
            await asyncio.sleep(0.02)
    return str(k["key"])


def _chat(max_tokens: int = 8) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens}  # fmt: skip


async def _fire(
    session: aiohttp.ClientSession, c: Cluster, key: str, n: int, concurrency: int = 24,
    prefix: str = "r", on_done: Any = None, max_tokens: int = 8,
) -> list[tuple[str, int, Any]]:  # fmt: skip
    queue = list(range(n))
    results: list[tuple[str, int, Any]] = []

    async def worker() -> None:
        while queue:
            i = queue.pop(0)
            rid = f"{prefix}-{i}"  # the gateway's own id replaces it when there is an answer
            h = {"Authorization": f"Bearer {key}"}
            try:
                async with session.post(
                    c.url(i % 3) + "/v1/chat/completions", json=_chat(max_tokens), headers=h
                ) as resp:
                    status, body = resp.status, await resp.json()
                    rid = resp.headers.get("x-request-id", rid)
            except aiohttp.ClientError:
                status, body = -1, None
            results.append((rid, status, body))
            if on_done is not None:
                await on_done(len(results))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def test_three_replicas_share_exact_rpm_and_tpm(
    cluster: tuple[Cluster, TcpProxy, str],
) -> None:
    c, _, _ = cluster
    async with aiohttp.ClientSession() as session:
        key = await _key(session, c, "rpm", rpm=120)
        results = await _fire(session, c, key, 600, concurrency=30)
        statuses = [s for _, s, _ in results]
        assert statuses.count(200) == 120
        assert statuses.count(429) == 480
        tkey = await _key(session, c, "tpm", tpm=3000)
        results = await _fire(session, c, tkey, 200, prefix="t", max_tokens=20)
        used = [b["usage"]["total_tokens"] for _, s, b in results if s == 200]
        reservation = 20 + 40  # max_tokens + a generous prompt estimate
        assert 0 < sum(used) <= 3000 + reservation


async def test_outage_and_sigkill_lose_and_double_nothing(
    cluster: tuple[Cluster, TcpProxy, str],
) -> None:
    c, proxy, db_url = cluster
    n = int(os.environ.get("FG_SPEND_REQUESTS", "10000"))
    async with aiohttp.ClientSession() as session:
        keys = [await _key(session, c, f"team{i}") for i in range(3)]
        cut_task: list[asyncio.Task[None]] = []

        async def outage() -> None:
            await proxy.cut()
            await asyncio.sleep(20)
            await proxy.restore()

        async def maybe_cut(done: int) -> None:
            if done == n // 6 and not cut_task:
                cut_task.append(asyncio.ensure_future(outage()))

        results: list[tuple[str, int, Any]] = []
        per_key = n // 3
        for j, key in enumerate(keys):
            results += await _fire(session, c, key, per_key, prefix=f"s{j}", on_done=maybe_cut)
        await asyncio.gather(*cut_task)
        assert [s for _, s, _ in results].count(200) == len(results)  # none failed for it
        # SIGKILL a gateway mid-run, then restart it on the same data dir
        killed: list[tuple[str, int, Any]] = []

        async def kill_midway(done: int) -> None:
            if done == 150:
                c.procs[2].send_signal(signal.SIGKILL)

        killed = await _fire(session, c, keys[0], 300, prefix="k", on_done=kill_midway)
        c.procs[2].wait()
        c.start(2)
        await _wait_live(session, c.url(2), c.procs[2])
        ok = [(rid, b) for rid, s, b in [*results, *killed] if s == 200]
        expected = {rid: _independent_cost(b["usage"], PRICE) for rid, b in ok}
        db = Database.from_url(db_url, c.tmp, migrations=MIGRATIONS)
        try:
            for _ in range(100):
                async with db.engine.connect() as conn:
                    rows = (await conn.execute(select(spend.c.request_id, spend.c.cost_nusd))).all()
                if {r.request_id for r in rows} >= set(expected):
                    break
                await asyncio.sleep(0.3)
        finally:
            await db.aclose()
        stored = {r.request_id: r.cost_nusd for r in rows}
        assert set(expected) <= set(stored), f"missing {len(set(expected) - set(stored))}"
        assert len(rows) == len(stored)  # nothing twice
        async with session.get(
            c.url(1) + "/admin/spend?group_by=team", headers={"Authorization": f"Bearer {MASTER}"}
        ) as resp:
            report = (await resp.json())["data"]
        # requests killed after the gateway answered them may add rows the client never saw
        extra = sum((Decimal(v) for rid, v in stored.items() if rid not in expected), Decimal(0))
        extra /= 10**9
        reported = sum(Decimal(r["spend_nusd"]) for r in report) / 10**9
        assert abs(reported - extra - sum(expected.values())) < Decimal("0.005")
