"""Redis away under a running gateway: the limiter's policy decides at once (no queue, no
hang), the event is counted, limits return with Redis, and revocations still reach every
replica through the store."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.procs import metric_value
from tests.tenancy.support import (
    Gateway,
    TcpProxy,
    gateway_via_redis_proxy,
    running_gateway,
    wait_for,
)


async def _metrics(gw: Gateway) -> str:
    async with gw.session.get(gw.url + "/metrics") as resp:
        return await resp.text()


@pytest.mark.redis
@pytest.mark.parametrize("outage", ["cut", "stall"])
@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
async def test_the_policy_decides_at_once_while_redis_is_away(
    policy: str, outage: str, upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    async with gateway_via_redis_proxy(
        upstream, tmp_path, redis_prefix, limiter_failure=policy
    ) as (gw, proxy):
        _, _, key = await gw.team_and_key("outage", rpm=3)
        assert [(await gw.chat(key))[0] for _ in range(4)] == [200, 200, 200, 429]

        await (proxy.cut() if outage == "cut" else proxy.stall())
        started = time.monotonic()
        during = [await gw.chat(key) for _ in range(10)]
        elapsed = time.monotonic() - started
        # the first request waits at most the client's timeout (0.25 s); the breaker then
        # answers the rest without touching Redis
        assert elapsed < 2.0, f"10 requests took {elapsed:.2f} s during the outage"
        if policy == "fail_open":
            assert [s for s, _, _ in during] == [200] * 10  # admitted, unlimited
        else:
            assert [s for s, _, _ in during] == [503] * 10
            assert {b["error"]["code"] for _, _, b in during} == {"limiter_unavailable"}
        text = await _metrics(gw)
        assert metric_value(text, "fleetgate_limiter_unavailable_total", policy=policy) >= 10

        await proxy.restore()

        async def limited_again() -> bool:  # the window still holds the three admissions
            return (await gw.chat(key))[0] == 429

        await wait_for(limited_again, timeout=5.0, interval=0.2)


@pytest.mark.redis
async def test_a_revocation_reaches_every_replica_while_redis_is_away(
    upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    proxy = TcpProxy(6379)
    await proxy.start()
    db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    try:
        async with AsyncExitStack() as stack:
            replicas = [
                await stack.enter_async_context(
                    running_gateway(
                        upstream,
                        tmp_path / f"r{i}",
                        db_url,
                        f"redis://127.0.0.1:{proxy.port}/0",
                        redis_prefix=redis_prefix,
                        limiter_failure="fail_open",
                    )
                )
                for i in range(2)
            ]
            _, key_id, key = await replicas[0].team_and_key("revocable")

            async def known_everywhere() -> bool:
                return all([(await r.chat(key))[0] == 200 for r in replicas])

            await wait_for(known_everywhere, timeout=3.0)
            await proxy.stall()  # Redis silent: no change notices, no limits
            await asyncio.sleep(4.0)  # the change feeds notice and fall back to the store
            assert all(not r.tenancy.sync.feed_up for r in replicas)
            status, _ = await replicas[0].admin("DELETE", f"/admin/keys/{key_id}")
            assert status == 200
            revoked_at = time.monotonic()

            async def refused() -> bool:
                return (await replicas[1].chat(key))[0] == 401

            await wait_for(refused, timeout=3.0, interval=0.05)
            assert time.monotonic() - revoked_at < 1.0
    finally:
        await proxy.close()


async def _budget_counter(gw: Gateway, team_id: str) -> tuple[int | None, int]:
    """(the limiter's spend counter of the team, the store's spend total of the team)."""
    budgets = gw.tenancy.budgets
    scopes = [s for kind, sid, _, s in budgets._budget_scopes(gw.tenancy.cache.snapshot)
              if kind == "team" and sid == team_id]  # fmt: skip
    counted = await gw.tenancy.limiter.spent(scopes[0])
    await gw.tenancy.writer.flush()
    _, report = await gw.admin("GET", f"/admin/spend?group_by=team&team={team_id}")
    stored = round(sum(row["spend_usd"] for row in report["data"]) * 1e9)
    return counted, stored


@pytest.mark.redis
async def test_budget_counters_catch_up_after_an_outage_a_restart_and_a_cold_start(
    upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    """Spend admitted while Redis was away (fail_open) reaches the budget counter when it
    returns; a Redis that lost its data gets the store's totals back; a gateway starts with
    Redis down and budgets configured."""
    proxy = TcpProxy(6379)
    await proxy.start()
    db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    redis_url = f"redis://127.0.0.1:{proxy.port}/0"
    settings = {"redis_prefix": redis_prefix, "limiter_failure": "fail_open",
                "budget_refresh_s": 0.3}  # fmt: skip
    try:
        async with running_gateway(upstream, tmp_path / "a", db_url, redis_url, **settings) as gw:
            team_id, _, key = await gw.team_and_key(
                "budgeted", team_fields={"max_budget_usd": 100.0}
            )
            for _ in range(5):
                assert (await gw.chat(key))[0] == 200
            await proxy.cut()
            for _ in range(5):
                assert (await gw.chat(key))[0] == 200  # admitted unlimited, billed in the store
            await proxy.restore()

            async def caught_up() -> bool:
                counted, stored = await _budget_counter(gw, team_id)
                return stored > 0 and counted == stored

            await wait_for(caught_up, timeout=5.0, interval=0.2)

            async def released() -> bool:
                return gw.tenancy.settles.queued() == 0

            await wait_for(released, timeout=5.0)
            assert await caught_up()  # the queued settles released, and added nothing more

            # Redis loses everything (a restart without persistence) and drops our connection
            await gw.tenancy.limiter.redis.call("DEL", *[
                k.decode() for k in await gw.tenancy.limiter.redis.call(
                    "KEYS", f"{redis_prefix}spend:*")
            ])  # fmt: skip
            assert (await _budget_counter(gw, team_id))[0] == 0
            await proxy.cut()
            await proxy.restore()
            await wait_for(caught_up, timeout=5.0, interval=0.2)

        await proxy.cut()  # a cold start with Redis away and a budget in the store
        async with running_gateway(upstream, tmp_path / "b", db_url, redis_url, **settings) as gw:
            assert (await gw.chat(key))[0] == 200
            await proxy.restore()
            await wait_for(caught_up, timeout=5.0, interval=0.2)
    finally:
        await proxy.close()
