"""`RedisLimiter` across a Redis that restarts empty while requests hold reservations: their
late settles change nothing, and no request is refused for a slot nobody holds."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fleetgate.errors import LimiterUnavailable
from fleetgate.limits import RedisLimiter, Reservation, Scope
from fleetgate.resp import RespClient
from tests.tenancy.support import free_port


class RestartableRedis:
    """A redis-server of the test's own on 127.0.0.1, without persistence: a restart
    empties it (the shared server is not ours to restart)."""

    def __init__(self, server: str, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        probe = RespClient(self.url)
        try:
            for _ in range(100):  # at most 10 s
                try:
                    await probe.call("PING")
                    return
                except (ConnectionError, OSError):
                    await asyncio.sleep(0.1)
            raise AssertionError("redis-server did not start")
        finally:
            await probe.aclose()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    async def restart(self) -> None:
        self.stop()
        await self.start()


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RestartableRedis]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    redis = RestartableRedis(server, tmp_path)
    await redis.start()
    try:
        yield redis
    finally:
        redis.stop()


async def _until(check: Callable[[], object], timeout: float = 5.0) -> None:
    """Await ``check()`` until it no longer raises `LimiterUnavailable` (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            result = check()
            if asyncio.isfuture(result) or asyncio.iscoroutine(result):
                await result
            return
        except LimiterUnavailable:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.02)


async def _one_after_another(
    lim: RedisLimiter, scopes: tuple[Scope, ...], count: int, *, tokens: int, used: int
) -> list[object]:
    """Reserve ``count`` requests one after another, each settled (``used`` tokens) before the
    next is reserved; returns the refusals."""
    refused: list[object] = []
    for i in range(count):
        got = await lim.reserve(f"after-{i}", scopes, tokens)
        if not isinstance(got, Reservation):
            refused.append(got)
            continue
        lim.settle(got, used, 0)  # sent; the next request does not wait for its reply
    return refused


async def test_after_redis_restarts_empty_one_at_a_time_is_never_refused(
    redis_server: RestartableRedis,
) -> None:
    """A client with one parallel slot sends its next request as soon as it has the answer
    to the last (the settle is not awaited, as the tenancy stage does not await it)."""
    lim = RedisLimiter(RespClient(redis_server.url), prefix="t:", breaker_s=0.05)
    scope = (Scope("key:one", rpm=1000, tpm=1_000_000, max_parallel=2),)
    try:
        before = await lim.reserve("before", scope, 10)
        assert isinstance(before, Reservation)
        held = await lim.reserve("in-flight", scope, 10)  # in flight across the restart
        assert isinstance(held, Reservation)
        await lim.settle(before, 5, 0)
        await redis_server.restart()
        # the first request after the restart finds the old connection broken
        await _until(lambda: lim.reserve("probe", (Scope("key:probe", rpm=1000),), 1))
        one = (Scope("key:one", rpm=1000, tpm=1_000_000, max_parallel=1),)
        refused = await _one_after_another(lim, one, 6, tokens=10, used=5)
        # the in-flight request ends meanwhile; its settle is retried (as `Settles` does)
        # against the Redis that forgot it
        await _until(lambda: lim.settle(held, 5, 0))
        assert refused == []
        raw = RespClient(redis_server.url)
        try:
            assert await raw.call("ZCARD", "t:lim:key:one:par") == 0  # nothing held
            assert int(await raw.call("HGET", "t:lim:key:one:th", "__total")) >= 0
        finally:
            await raw.aclose()
    finally:
        await lim.redis.aclose()


async def test_after_redis_forgot_its_scripts_one_at_a_time_is_never_refused(
    redis_server: RestartableRedis,
) -> None:
    """Redis loses the scripts but not the connection (SCRIPT FLUSH, a failover behind a
    proxy): the next reservation loads them all again, so the settle after it is not sent a
    round trip late, behind the next reservation."""
    lim = RedisLimiter(RespClient(redis_server.url), prefix="t:")
    one = (Scope("key:flush", max_parallel=1),)
    try:
        first = await lim.reserve("first", one, 1)
        assert isinstance(first, Reservation)
        await lim.settle(first, 1, 0)
        await lim.redis.call("SCRIPT", "FLUSH")
        refused = await _one_after_another(lim, one, 4, tokens=1, used=1)
        assert refused == []
    finally:
        await lim.redis.aclose()
