"""Both limiters: exact sliding-window RPM, TPM reserve/settle, parallel, budgets, outages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetgate.errors import LimiterUnavailable, ServiceUnavailable
from fleetgate.limits import (
    Denial,
    Limiter,
    MemoryLimiter,
    RedisLimiter,
    Reservation,
    Scope,
)
from fleetgate.resp import RespClient
from tests.tenancy.support import REDIS_URL, free_port


@pytest.fixture(params=["memory", "redis"])
async def limiter(request: pytest.FixtureRequest, redis_prefix: str) -> AsyncIterator[Limiter]:
    lim: Limiter
    if request.param == "memory":
        lim = MemoryLimiter()
    else:
        lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        yield lim
    finally:
        await lim.aclose()
        if isinstance(lim, RedisLimiter):
            await lim.redis.aclose()  # the limiter never closes the connection it was handed


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
    await limiter.raise_spend(scopes[0], 400)
    await limiter.raise_spend(scopes[0], 0)  # raising never lowers a live counter
    r = await limiter.reserve("m1", scopes, 1)
    assert isinstance(r, Reservation)
    assert await limiter.settle(r, 1, 700) == {"key:b": 1_100}
    refused = await limiter.reserve("m2", scopes, 1)
    assert isinstance(refused, Denial) and refused.reason == "budget"
    assert await limiter.spent(scopes[0]) == 1_100


async def test_two_replicas_share_one_redis_counter(redis_prefix: str) -> None:
    a = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    b = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        scopes = (Scope("key:shared", rpm=4),)
        got = [await (a if i % 2 else b).reserve(f"m{i}", scopes, 1) for i in range(10)]
        assert sum(isinstance(r, Reservation) for r in got) == 4
    finally:
        await a.redis.aclose()
        await b.redis.aclose()


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
async def test_redis_down_applies_the_policy_and_counts_it(policy: str) -> None:
    seen: list[str] = []
    dead = RespClient(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.1)
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
        # settling while Redis is away says so, and that nothing was applied
        reservation = Reservation("m", scopes, 1, enforced=False)
        with pytest.raises(LimiterUnavailable) as caught:
            await lim.settle(reservation, 1, 10)
        assert not caught.value.maybe_applied
        assert seen == [policy] * 3  # settles are not requests decided by the policy
    finally:
        await dead.aclose()


async def test_a_restarted_counter_is_raised_to_the_store_total(redis_prefix: str) -> None:
    """Budget counters are raised, never lowered: what the store knows survives a Redis
    that lost its data, and a live counter above the store's total is kept."""
    lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        scope = Scope("team:r", budget_nusd=10_000, period_start_ms=0)
        first = lim.generation()
        await lim.raise_spend(scope, 3_000)
        assert lim.generation() != first  # connecting is a new generation
        r = await lim.reserve("m1", (scope,), 1)
        assert isinstance(r, Reservation)
        assert await lim.settle(r, 1, 500) == {"team:r": 3_500}
        await lim.raise_spend(scope, 3_200)  # the store lags behind: kept at 3,500
        assert await lim.spent(scope) == 3_500
        await lim.redis.call("DEL", f"{redis_prefix}spend:{scope.budget_key}")  # a restart
        await lim.raise_spend(scope, 3_200)
        assert await lim.spent(scope) == 3_200
    finally:
        await lim.redis.aclose()


async def test_a_redis_settle_is_sent_when_called_not_when_awaited(redis_prefix: str) -> None:
    """So a settle issued before the response is written frees the slot before the client can
    send its next request, to this replica or any other."""
    lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    other = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        scope = Scope("key:s", max_parallel=1)
        first = await lim.reserve("m1", (scope,), 1)
        assert isinstance(first, Reservation)
        settling = lim.settle(first, 1, 0)  # not awaited yet
        # another replica's reservation, sent after it, sees the slot free
        assert isinstance(await other.reserve("m2", (scope,), 1), Reservation)
        assert await settling == {}
    finally:
        await lim.redis.aclose()
        await other.redis.aclose()


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
async def test_a_redis_error_reply_such_as_readonly_follows_the_policy(
    policy: str, tmp_path: Path
) -> None:
    """A replica during a failover answers writes with READONLY: the failure policy applies,
    never a 500."""
    import shutil
    import subprocess

    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--replicaof", "127.0.0.1", str(free_port()), "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    seen: list[str] = []
    lim = RedisLimiter(
        RespClient(f"redis://127.0.0.1:{port}/0"), policy=policy, on_unavailable=seen.append
    )  # type: ignore[arg-type]
    try:
        for _ in range(50):  # until the replica answers
            try:
                await lim.redis.call("PING")
                break
            except (ConnectionError, OSError):
                await asyncio.sleep(0.1)
        scopes = (Scope("key:x", rpm=1),)
        if policy == "fail_open":
            r = await lim.reserve("m", scopes, 1)
            assert isinstance(r, Reservation) and not r.enforced
        else:
            with pytest.raises(ServiceUnavailable):
                await lim.reserve("m", scopes, 1)
        assert seen == [policy]
    finally:
        await lim.redis.aclose()
        proc.terminate()
        proc.wait(10)


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[str]:
    """A Redis of this test's own (the shared one's scripts are not ours to flush)."""
    import shutil
    import subprocess

    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    probe = RespClient(url)
    try:
        for _ in range(50):
            try:
                await probe.call("PING")
                break
            except (ConnectionError, OSError):
                await asyncio.sleep(0.1)
        yield url
    finally:
        await probe.aclose()
        proc.terminate()
        proc.wait(10)


async def test_a_redis_settle_after_redis_forgot_the_script_loads_it_and_applies(
    private_redis: str,
) -> None:
    """The settle's reply arrives as NOSCRIPT (a restarted Redis, SCRIPT FLUSH): the script is
    loaded, the settle sent again, and it frees the slot and counts the cost once."""
    lim = RedisLimiter(RespClient(private_redis), prefix="t:")
    try:
        scope = Scope("key:n", max_parallel=1, budget_nusd=10_000)
        first = await lim.reserve("m1", (scope,), 1)
        assert isinstance(first, Reservation)
        await lim.redis.call("SCRIPT", "FLUSH")
        assert await lim.settle(first, 1, 700) == {"key:n": 700}
        assert await lim.spent(scope) == 700
        assert isinstance(await lim.reserve("m2", (scope,), 1), Reservation)  # slot freed
    finally:
        await lim.redis.aclose()


async def test_a_redis_settle_lost_in_flight_says_it_may_have_applied(
    private_redis: str,
) -> None:
    """The connection drops while the settle waits for its reply: `LimiterUnavailable` with
    ``maybe_applied`` (so a retry releases only), and the breaker opens."""
    lim = RedisLimiter(RespClient(private_redis), prefix="t:")
    killer = RespClient(private_redis)
    try:
        scope = Scope("key:l", max_parallel=1)
        first = await lim.reserve("m1", (scope,), 1)
        assert isinstance(first, Reservation)
        own_id = await lim.redis.call("CLIENT", "ID")
        blocked = asyncio.ensure_future(lim.redis.call("BLPOP", "t:never", 5))
        await asyncio.sleep(0.05)
        settling = lim.settle(first, 1, 0)  # queued behind the blocking call
        await killer.call("CLIENT", "KILL", "ID", own_id)
        with pytest.raises(LimiterUnavailable) as info:
            await settling
        assert info.value.maybe_applied
        with pytest.raises(ConnectionError):
            await blocked
        with pytest.raises(LimiterUnavailable):  # the breaker is open: no wait on Redis
            await lim.settle(first, 1, 0)
    finally:
        await killer.aclose()
        await lim.redis.aclose()


async def test_a_redis_reservation_sent_ahead_answers_like_reserve(redis_prefix: str) -> None:
    """`reserve_sent` sends the reservation with the loop turn's writes (no await needed) and
    resolves to what `reserve` would: grant, then refusal."""
    lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        scope = Scope("key:ahead", rpm=2)
        assert lim.reserve_sent("m0", (scope,), 1) is None  # not connected yet: `reserve`
        assert isinstance(await lim.reserve("m1", (scope,), 1), Reservation)
        sent = lim.reserve_sent("m2", (scope,), 1)
        assert sent is not None
        granted = await sent
        assert isinstance(granted, Reservation) and granted.usage[0].remaining_requests == 0
        refused = lim.reserve_sent("m3", (scope,), 1)
        assert refused is not None
        denial = await refused
        assert isinstance(denial, Denial) and denial.reason == "requests"
        assert MemoryLimiter().reserve_sent("m", (scope,), 1) is None  # nothing to overlap
    finally:
        await lim.redis.aclose()


async def test_a_reservation_sent_ahead_after_redis_forgot_the_script_still_applies(
    private_redis: str,
) -> None:
    lim = RedisLimiter(RespClient(private_redis), prefix="t:")
    try:
        scope = Scope("key:a", max_parallel=1)
        first = await lim.reserve("m1", (scope,), 1)
        assert isinstance(first, Reservation)
        await lim.settle(first, 1, 0)
        await lim.redis.call("SCRIPT", "FLUSH")
        sent = lim.reserve_sent("m2", (scope,), 1)
        assert sent is not None
        assert isinstance(await sent, Reservation)  # loaded and sent again
        again = await lim.reserve("m3", (scope,), 1)
        assert isinstance(again, Denial) and again.reason == "parallel"  # m2 holds the slot
    finally:
        await lim.redis.aclose()


async def test_a_reservation_sent_ahead_and_lost_follows_the_policy(redis_prefix: str) -> None:
    for policy in ("fail_closed", "fail_open"):
        lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix, policy=policy)
        scope = Scope("key:lost", rpm=10)
        assert isinstance(await lim.reserve("m1", (scope,), 1), Reservation)
        sent = lim.reserve_sent("m2", (scope,), 1)
        assert sent is not None
        await lim.redis.aclose()  # the connection closes before the reply is read
        if policy == "fail_closed":
            with pytest.raises(LimiterUnavailable):
                await sent
        else:
            degraded = await sent
            assert isinstance(degraded, Reservation) and not degraded.enforced
        assert lim.reserve_sent("m3", (scope,), 1) is None  # marked down: the serial way


async def test_a_reservation_is_crowded_once_a_parallel_scope_is_more_than_half_full(
    redis_prefix: str,
) -> None:
    """Only then must its settle go out before the response: with the scope at most half full,
    a slot freed microseconds late cannot be what refuses the client's next request."""
    lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        four = Scope("key:four", max_parallel=4)
        crowded = []
        for i in range(4):
            got = await lim.reserve(f"m{i}", (four,), 1)
            assert isinstance(got, Reservation)
            crowded.append(got.crowded)
        assert crowded == [False, False, True, True]  # 1/4, 2/4, 3/4, 4/4 held
        one = Scope("key:one", max_parallel=1)
        solo = await lim.reserve("s", (one, Scope("team:t", rpm=100)), 1)
        assert isinstance(solo, Reservation) and solo.crowded  # a one-slot key: always
        plain = await lim.reserve("p", (Scope("key:rpm", rpm=100),), 1)
        assert isinstance(plain, Reservation) and not plain.crowded  # no slot to free
        assert MemoryLimiter().reserve_sent("x", (four,), 1) is None
    finally:
        await lim.redis.aclose()


async def test_a_settle_that_is_not_crowded_leaves_with_the_loop_turn(redis_prefix: str) -> None:
    """A crowded settle is written before `settle` returns (before the response); another one
    is queued for the end of the loop turn (after the response the caller writes next)."""
    lim = RedisLimiter(RespClient(REDIS_URL), prefix=redis_prefix)
    try:
        roomy = Scope("key:roomy", max_parallel=100)
        first = await lim.reserve("r1", (roomy,), 1)
        assert isinstance(first, Reservation) and not first.crowded
        conn = lim.redis._conn
        assert conn is not None
        settling = lim.settle(first, 1, 0)
        assert conn._out  # queued, not written yet
        assert await settling == {}
        tight = await lim.reserve("t1", (Scope("key:tight", max_parallel=1),), 1)
        assert isinstance(tight, Reservation) and tight.crowded
        settling = lim.settle(tight, 1, 0)
        assert not conn._out  # written at once
        assert await settling == {}
    finally:
        await lim.redis.aclose()
