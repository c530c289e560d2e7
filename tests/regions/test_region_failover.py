"""The region test (issue #33 item 5): two regions on this machine, each two ``fleetgate serve``
processes with their own Redis and simulated engine, sharing one fresh PostgreSQL database.
A client resolves the service name the way a DNS health check would: it polls every
gateway's ``/health/region`` and sends to the ready gateways of the preferred region (eu), else
to the other (us); a connect error (the request never started) is retried on a fresh
resolution. Under steady load every process of eu is SIGKILLed:

- requests are served from us within 10 s of the kill (RTO, printed);
- no request that had not started is lost: every request is a 200, or was in flight at eu
  when it died (at most one per client worker);
- every 200 of us has its spend and audit row in PostgreSQL; eu's 200s without rows (their
  records were in the killed processes' spools) are counted (RPO, printed), and a gateway
  started on eu's surviving data dirs writes them: afterwards every 200 has both rows.
"""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from fleetgate.cli.processes import wait_http
from tests.regions.support import MODEL, Region, gateway_config, start_gateway

pytestmark = pytest.mark.slow

MASTER = "sk-region-master"
WORKERS = 6
STEADY_S = 3.0
AFTER_S = 3.0
RTO_LIMIT_S = 10.0


class Resolver:
    """The service name -> the ready gateways of the first region (in order) that has any,
    re-polled every ``interval`` (a DNS health check with a short TTL)."""

    def __init__(self, session: aiohttp.ClientSession, regions: dict[str, list[str]]) -> None:
        self.session = session
        self.regions = regions
        self.answer: tuple[str, list[str]] | None = None

    async def _ready(self, url: str) -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with self.session.get(f"{url}/health/region", timeout=timeout) as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def refresh(self) -> None:
        for name, urls in self.regions.items():
            answers = await asyncio.gather(*map(self._ready, urls))
            ready = [u for u, ok in zip(urls, answers, strict=True) if ok]
            if ready:
                self.answer = (name, ready)
                return
        self.answer = None

    async def run(self, stop: asyncio.Event, interval: float = 0.25) -> None:
        while not stop.is_set():
            await self.refresh()
            await asyncio.sleep(interval)


@dataclass
class Log:
    ok: list[tuple[str, str, float]] = field(default_factory=list)  # request id, region, done at
    cut: list[str] = field(default_factory=list)  # region of requests cut in flight
    failed: list[tuple[str, int]] = field(default_factory=list)
    connect_retries: int = 0


async def worker(
    session: aiohttp.ClientSession, resolver: Resolver, key: str, stop: asyncio.Event, log: Log
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key}"}
    while not stop.is_set():
        answer = resolver.answer
        if answer is None:
            await asyncio.sleep(0.05)
            continue
        region, urls = answer
        url = random.choice(urls)
        try:
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
                if r.status == 200:
                    log.ok.append((r.headers["x-request-id"], region, time.monotonic()))
                else:
                    log.failed.append((region, r.status))
        except aiohttp.ClientConnectorError:
            log.connect_retries += 1  # never reached the gateway: retried on a fresh resolution
            await resolver.refresh()
        except (aiohttp.ClientError, TimeoutError):
            log.cut.append(region)  # sent, then the gateway died under it


async def rows(pg_url: str, ids: list[str]) -> tuple[set[str], set[str]]:
    conn = await asyncpg.connect(pg_url)
    try:
        spend = await conn.fetch("SELECT request_id FROM fg_spend WHERE request_id = ANY($1)", ids)
        audit = await conn.fetch(
            "SELECT request_id FROM fg_request_audit WHERE request_id = ANY($1)", ids
        )
    finally:
        await conn.close()
    return {r["request_id"] for r in spend}, {r["request_id"] for r in audit}


async def missing_after(pg_url: str, ids: list[str], timeout: float) -> set[str]:
    """Ids without a spend or an audit row once they stop arriving (or ``timeout`` passes)."""
    deadline = time.monotonic() + timeout
    while True:
        spend, audit = await rows(pg_url, ids)
        missing = set(ids) - (spend & audit)
        if not missing or time.monotonic() > deadline:
            return missing
        await asyncio.sleep(0.2)


async def team_key(session: aiohttp.ClientSession, url: str) -> str:
    master = {"Authorization": f"Bearer {MASTER}"}
    async with session.post(f"{url}/admin/teams", json={"name": "regions"}, headers=master) as r:
        assert r.status in (200, 201), await r.text()
        team = await r.json()
    async with session.post(f"{url}/admin/keys", json={"team": team["id"]}, headers=master) as r:
        assert r.status in (200, 201), await r.text()
        return str((await r.json())["key"])


async def known_everywhere(session: aiohttp.ClientSession, urls: list[str], key: str) -> float:
    """Seconds until every gateway in ``urls`` accepts ``key`` (created in another region: it
    arrives by the tenancy cache's version backstop, not by that region's Redis feed)."""
    start = time.monotonic()
    headers = {"Authorization": f"Bearer {key}"}
    for url in urls:
        while True:
            async with session.get(f"{url}/v1/models", headers=headers) as r:
                if r.status == 200:
                    break
            assert time.monotonic() - start < 20, f"{url} never learned the key"
            await asyncio.sleep(0.1)
    return time.monotonic() - start


async def test_killing_a_region_under_load_fails_over_without_losing_records(
    tmp_path: Path, shared_pg_url: str
) -> None:
    with ExitStack() as stack:
        eu = Region(stack, tmp_path, "eu", shared_pg_url, MASTER)
        us = Region(stack, tmp_path, "us", shared_pg_url, MASTER)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            key = await team_key(session, eu.urls[0])
            key_lag = await known_everywhere(session, us.urls, key)
            resolver = Resolver(session, {"eu": eu.urls, "us": us.urls})
            deadline = time.monotonic() + 60
            while (resolver.answer or ("", []))[0] != "eu" or len(resolver.answer or "") == 0:
                assert time.monotonic() < deadline, "region eu never became ready"
                await resolver.refresh()
                await asyncio.sleep(0.2)

            log, stop = Log(), asyncio.Event()
            tasks = [asyncio.ensure_future(resolver.run(stop))]
            tasks += [
                asyncio.ensure_future(worker(session, resolver, key, stop, log))
                for _ in range(WORKERS)
            ]
            await asyncio.sleep(STEADY_S)
            before = len(log.ok)
            killed = time.monotonic()
            eu.kill()
            while not any(region == "us" and t > killed for _, region, t in log.ok):
                if time.monotonic() - killed > RTO_LIMIT_S + 5:
                    stop.set()
                    await asyncio.gather(*tasks)
                    raise AssertionError(
                        f"nothing served from us: resolver {resolver.answer}, "
                        f"failed {log.failed[-5:]}, cut {len(log.cut)}"
                    )
                await asyncio.sleep(0.02)
            rto = min(t for _, region, t in log.ok if region == "us" and t > killed) - killed
            await asyncio.sleep(AFTER_S)
            stop.set()
            await asyncio.gather(*tasks)

            served = {name: [i for i, r, _ in log.ok if r == name] for name in ("eu", "us")}
            done_at = {i: t for i, _, t in log.ok}
            lost_us = await missing_after(shared_pg_url, served["us"], timeout=15)
            lost_eu = await missing_after(shared_pg_url, served["eu"], timeout=2)
            late = max((killed - done_at[i] for i in lost_eu), default=0.0)

            # eu's machines come back with their disks: a gateway on each surviving data dir
            # replays the spool it finds there into PostgreSQL
            recovered = [
                start_gateway(stack, tmp_path, d, gateway_config(us.engine), us.env)
                for d in eu.data_dirs
            ]
            for url, proc in recovered:
                wait_http(f"{url}/health/live", proc, timeout=90)
            lost_eu_after = await missing_after(shared_pg_url, served["eu"], timeout=20)

    print(
        f"\nregion failover: {before} x 200 before the kill, {len(log.ok)} in all "
        f"(eu {len(served['eu'])}, us {len(served['us'])}); RTO {rto:.2f} s; "
        f"cut in flight {len(log.cut)}; connect errors retried {log.connect_retries}; "
        f"completed but unrecorded (RPO): eu {len(lost_eu)} (oldest {late:.2f} s before the kill), "
        f"us {len(lost_us)}; after the spool replay: {len(lost_eu_after)}; "
        f"key made in eu accepted in us after {key_lag:.1f} s"
    )
    assert before > 0 and served["eu"], "no steady load before the kill"
    assert rto < RTO_LIMIT_S
    assert not log.failed, log.failed
    assert all(region == "eu" for region in log.cut) and len(log.cut) <= WORKERS, log.cut
    assert not lost_us, f"{len(lost_us)} of us's 200s have no spend or audit row"
    assert late < 5.0, "a record completed long before the kill was still unwritten"
    assert not lost_eu_after, f"{len(lost_eu_after)} of eu's 200s unrecorded after the replay"


async def test_region_readiness_names_lost_engines_and_a_lost_redis(
    tmp_path: Path, shared_pg_url: str
) -> None:
    """``/health/ready`` and ``/health/region`` are 503 once the region's engines are gone
    (health is passive: an idle gateway notices a dead engine with the first request sent to
    it, a connection failure cools the deployment at once); ``/health/region`` also names a
    Redis that does not answer."""
    with ExitStack() as stack:
        region = Region(stack, tmp_path, "eu", shared_pg_url, MASTER, gateways=1)
        url = region.urls[0]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

            async def get(path: str) -> tuple[int, dict[str, object]]:
                async with session.get(f"{url}{path}") as r:
                    return r.status, dict(await r.json())

            status, body = await get("/health/region")
            assert (status, body["redis"]) == (200, "ok"), body

            region.engine_proc.kill()
            region.engine_proc.wait()
            assert (await get("/health/ready"))[0] == 200, "an idle gateway probes no engine"
            chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            headers = {"Authorization": f"Bearer {MASTER}"}
            async with session.post(f"{url}/v1/chat/completions", json=chat, headers=headers) as r:
                assert r.status >= 500, await r.text()
            deadline = time.monotonic() + 15
            while (seen := await get("/health/ready"))[0] != 503:
                assert time.monotonic() < deadline, f"readiness never saw the engine go: {seen}"
                await asyncio.sleep(0.2)
            status, body = await get("/health/region")
            assert status == 503 and body["unavailable_aliases"] == [MODEL], body
            assert body["redis"] == "ok", body

            region.redis.kill()
            region.redis.wait()
            status, body = await get("/health/region")
            assert status == 503 and str(body["redis"]).startswith("down"), body
