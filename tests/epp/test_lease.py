"""The leader lease in Redis: one leader, renewals, release and take-over."""

from __future__ import annotations

import asyncio
import os
import time

import redis.asyncio as aioredis

from fleetgate.epp.lease import LeaderLease
from tests.tenancy.support import REDIS_URL


async def test_one_replica_leads_and_the_other_takes_over_when_it_leaves() -> None:
    redis = aioredis.Redis.from_url(REDIS_URL)
    key = f"fgepp-test-lease-{os.getpid()}-{time.time_ns()}"
    changes: list[tuple[str, bool]] = []
    try:
        first = LeaderLease(redis, key, ttl_s=0.6, owner="one",
                            on_change=lambda lead: changes.append(("one", lead)))  # fmt: skip
        second = LeaderLease(redis, key, ttl_s=0.6, owner="two",
                             on_change=lambda lead: changes.append(("two", lead)))  # fmt: skip
        await first.start()
        await second.start()
        assert (first.leader, second.leader) == (True, False)
        await asyncio.sleep(1.0)  # past one ttl: the leader renewed, the follower still waits
        assert (first.leader, second.leader) == (True, False)
        await first.aclose()  # released at once: the follower's next try takes it
        await asyncio.sleep(0.5)
        assert second.leader
        assert changes == [("one", True), ("one", False), ("two", True)]
        await second.aclose()
        assert await redis.get(key) is None
    finally:
        await redis.aclose()


async def test_a_replica_that_cannot_reach_redis_does_not_lead() -> None:
    redis = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    lease = LeaderLease(redis, "unreachable", ttl_s=0.9)
    try:
        assert await lease.step() is False
    finally:
        await redis.aclose()
