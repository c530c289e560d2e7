"""Both limiters: exact sliding-window RPM, TPM reserve/settle, parallel, budgets, outages."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleetgate.errors import ServiceUnavailable
from fleetgate.limits import (
    Denial,
    Limiter,
    MemoryLimiter,
    RedisLimiter,
    Reservation,
    Scope,
    limiter_redis,
)
from tests.tenancy.support import REDIS_URL, free_port


@pytest.fixture(params=["memory", "redis"])
async def limiter(request: pytest.FixtureRequest, redis_prefix: str) -> AsyncIterator[Limiter]:
    lim: Limiter
    if request.param == "memory":
        lim = MemoryLimiter()
    else:
        lim = RedisLimiter(limiter_redis(REDIS_URL), prefix=redis_prefix)
    try:
        yield lim
    finally:
        await lim.close()


async def test_rpm_admits_exactly_the_limit(limiter: Limiter) -> None:
    scopes = (Scope("key:a", rpm=5),)
    results = [await limiter.reserve(f"m{i}", scopes, 1) for i in range(8)]
    assert sum(isinstance(r, Reservation) for r in results) == 5
    denial = results[-1]
    assert isinstance(denial, Denial) and denial.reason == "requests"
    assert 0 < denial.retry_after_ms <= 60_000


async def test_a_refusal_in_one_scope_counts_in_none(limiter: Limiter) -> None:
    key, team = Scope("key:a", rpm=10), Scope("team:t", rpm=2)
    assert isinstance(await limiter.reserve("m1", (key, team), 1), Reservation)
    assert isinstance(await limiter.reserve("m2", (key, team), 1), Reservation)
    assert isinstance(await limiter.reserve("m3", (key, team), 1), Denial)
    # the key's own count did not grow from the refused request
    other = Scope("team:u", rpm=10)
    granted = await limiter.reserve("m4", (key, other), 1)
    assert isinstance(granted, Reservation)
    assert granted.usage[0].remaining_requests == 7


async def test_tpm_reserves_then_settles_to_actual(limiter: Limiter) -> None:
    scopes = (Scope("key:t", tpm=100),)
    first = await limiter.reserve("m1", scopes, 60)
    assert isinstance(first, Reservation)
    assert isinstance(await limiter.reserve("m2", scopes, 60), Denial)  # 120 > 100
    await limiter.settle(first, 10, 0)  # used far less than reserved
    second = await limiter.reserve("m3", scopes, 60)
    assert isinstance(second, Reservation)
    assert second.usage[0].remaining_tokens == 30


async def test_parallel_slots_free_on_settle(limiter: Limiter) -> None:
    scopes = (Scope("key:p", max_parallel=2),)
    a = await limiter.reserve("a", scopes, 1)
    b = await limiter.reserve("b", scopes, 1)
    assert isinstance(a, Reservation) and isinstance(b, Reservation)
    refused = await limiter.reserve("c", scopes, 1)
    assert isinstance(refused, Denial) and refused.reason == "parallel"
    await limiter.settle(a, 1, 0)
    assert isinstance(await limiter.reserve("d", scopes, 1), Reservation)


async def test_budget_refuses_once_spent(limiter: Limiter) -> None:
    scopes = (Scope("key:b", budget_nusd=1_000, period_start_ms=0),)
    await limiter.seed_spend(scopes[0], 400)
    await limiter.seed_spend(scopes[0], 0)  # a second seed never resets a live counter
    r = await limiter.reserve("m1", scopes, 1)
    assert isinstance(r, Reservation)
    assert await limiter.settle(r, 1, 700) == {"key:b": 1_100}
    refused = await limiter.reserve("m2", scopes, 1)
    assert isinstance(refused, Denial) and refused.reason == "budget"
    assert await limiter.spent(scopes[0]) == 1_100


async def test_two_replicas_share_one_redis_counter(redis_prefix: str) -> None:
    a = RedisLimiter(limiter_redis(REDIS_URL), prefix=redis_prefix)
    b = RedisLimiter(limiter_redis(REDIS_URL), prefix=redis_prefix)
    try:
        scopes = (Scope("key:shared", rpm=4),)
        got = [await (a if i % 2 else b).reserve(f"m{i}", scopes, 1) for i in range(10)]
        assert sum(isinstance(r, Reservation) for r in got) == 4
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
async def test_redis_down_applies_the_policy_and_counts_it(policy: str) -> None:
    seen: list[str] = []
    dead = limiter_redis(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.1)
    lim = RedisLimiter(dead, policy=policy, on_unavailable=seen.append)  # type: ignore[arg-type]
    try:
        scopes = (Scope("key:x", rpm=1),)
        for i in range(3):
            if policy == "fail_open":
                r = await lim.reserve(f"m{i}", scopes, 1)
                assert isinstance(r, Reservation) and not r.enforced
            else:
                with pytest.raises(ServiceUnavailable):
                    await lim.reserve(f"m{i}", scopes, 1)
        assert seen == [policy] * 3
    finally:
        await lim.close()
