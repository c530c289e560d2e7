"""`RedisLimiter`: exact limits shared by every replica and worker through atomic Lua scripts.

When Redis cannot be reached the configured policy decides: ``fail_open`` admits the request
unlimited, ``fail_closed`` refuses it with 503. Either way the event is logged and counted, and
for ``breaker_s`` afterwards requests do not wait on Redis at all (no queue builds up: the
connection pool is bounded and its waits and socket timeouts are short).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fleetgate.errors import ServiceUnavailable
from fleetgate.limits.base import LEASE_MS, WINDOW_MS, Denial, Reservation, Scope, ScopeUsage
from fleetgate.limits.scripts import RESERVE, SETTLE

__all__ = ["FailPolicy", "RedisLimiter", "limiter_redis"]

log = logging.getLogger("fleetgate.limits")

FailPolicy = Literal["fail_open", "fail_closed"]
_REASONS = {1: "requests", 2: "tokens", 3: "parallel", 4: "budget"}
_DAY_MS = 86_400_000
_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


def limiter_redis(url: str, *, timeout_s: float = 0.25, max_connections: int = 64) -> Redis:
    """A Redis client for limits: bounded pool, short waits, short socket timeouts."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
    return Redis(connection_pool=pool)


class RedisLimiter:
    """See `fleetgate.limits.base.Limiter`. ``on_unavailable(policy)`` counts outages."""

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "fg:",
        policy: FailPolicy = "fail_closed",
        breaker_s: float = 1.0,
        on_unavailable: Callable[[str], None] | None = None,
        settle_delay_s: float = 0.002,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.policy: FailPolicy = policy
        self.breaker_s = breaker_s
        self._on_unavailable = on_unavailable
        self._down_until = 0.0
        self._reserve = redis.register_script(RESERVE)
        self._settle = redis.register_script(SETTLE)
        self.settle_delay_s = settle_delay_s
        self._pending_settles: list[
            tuple[list[str], list[Any], asyncio.Future[list[Any] | None]]
        ] = []
        self._flusher: asyncio.Task[None] | None = None

    def _keys(self, scopes: tuple[Scope, ...]) -> list[str]:
        keys: list[str] = []
        for s in scopes:
            base = f"{self.prefix}lim:{s.name}:"
            keys += [base + "rq", base + "tk", base + "th", base + "par"]
            keys.append(f"{self.prefix}spend:{s.budget_key}")
        return keys

    def _unavailable(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + self.breaker_s
        log.warning("rate limiter: Redis unavailable (%s); policy %s", exc, self.policy)
        if self._on_unavailable is not None:
            self._on_unavailable(self.policy)

    def _degraded(self, member: str, scopes: tuple[Scope, ...], tokens: int) -> Reservation:
        if self.policy == "fail_closed":
            raise ServiceUnavailable(
                "Rate limiting is unavailable; try again shortly.", code="limiter_unavailable"
            )
        return Reservation(member, scopes, tokens, enforced=False)

    async def reserve(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> Reservation | Denial:
        if time.monotonic() < self._down_until:
            if self._on_unavailable is not None:
                self._on_unavailable(self.policy)
            return self._degraded(member, scopes, tokens)
        args: list[Any] = [member, tokens, len(scopes), WINDOW_MS, LEASE_MS]
        for s in scopes:
            args += [
                -1 if s.rpm is None else s.rpm,
                -1 if s.tpm is None else s.tpm,
                -1 if s.max_parallel is None else s.max_parallel,
                -1 if s.budget_nusd is None else s.budget_nusd,
                s.period_end_ms,
            ]
        try:
            out = await self._reserve(keys=self._keys(scopes), args=args)
        except _DOWN as exc:
            self._unavailable(exc)
            return self._degraded(member, scopes, tokens)
        values = [int(v) for v in out]
        if values[0] == 1:
            return Denial(scopes[values[1]].name, _REASONS[values[2]], values[3])
        usage = [
            ScopeUsage(
                None if values[i] < 0 else values[i],
                None if values[i + 1] < 0 else values[i + 1],
                values[i + 2],
                values[i + 3],
            )
            for i in range(1, len(values), 4)
        ]
        return Reservation(member, scopes, tokens, True, usage)

    async def settle(self, reservation: Reservation, tokens: int, cost_nusd: int) -> dict[str, int]:
        """Queue the settle; settles that finish within ``settle_delay_s`` of each other go to
        Redis in one pipelined round trip (a settle is off the request path: a few ms later
        only keeps a reservation a little longer, never lets more through)."""
        scopes = reservation.scopes
        args: list[Any] = [reservation.member, tokens, cost_nusd, len(scopes)]
        for s in scopes:
            args += [0 if s.budget_nusd is None else 1, s.period_end_ms + _DAY_MS]
        done: asyncio.Future[list[Any] | None] = asyncio.get_running_loop().create_future()
        self._pending_settles.append((self._keys(scopes), args, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_settles())
        out = await done
        if out is None:
            return {}
        return {s.name: int(v) for s, v in zip(scopes, out, strict=True) if int(v) >= 0}

    async def _flush_settles(self) -> None:
        await asyncio.sleep(self.settle_delay_s)
        while self._pending_settles:
            batch, self._pending_settles = self._pending_settles[:256], self._pending_settles[256:]
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for keys, args, _ in batch:
                        await self._settle(keys=keys, args=args, client=pipe)
                    results = await pipe.execute()
            except _DOWN as exc:
                self._unavailable(exc)
                results = [None] * len(batch)
            for (_, _, done), out in zip(batch, results, strict=True):
                if not done.done():
                    done.set_result(out)

    async def spent(self, scope: Scope) -> int | None:
        try:
            value = await self.redis.get(f"{self.prefix}spend:{scope.budget_key}")
        except _DOWN:
            return None
        return int(value or 0)

    async def seed_spend(self, scope: Scope, nusd: int) -> None:
        key = f"{self.prefix}spend:{scope.budget_key}"
        ttl = max(scope.period_end_ms + _DAY_MS - int(time.time() * 1000), 1000)
        await self.redis.set(key, nusd, nx=True, px=min(ttl, 2**40))

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()
