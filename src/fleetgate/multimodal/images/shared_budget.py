"""`SharedImageBudget`: the image compute budget held in Redis, shared by every gateway process.

With N processes (workers or replicas) in front of one deployment, a budget per process admits N
times the deployment's image tokens. Here each deployment's admitted tokens live in one Redis
sorted set, ``<prefix>imgbudget:<deployment>``: one member per admitted request (its tokens are
the member's last field), scored by the lease's expiry (milliseconds, Redis ``TIME``, so clocks
of the gateway hosts do not matter). One script drops expired leases, sums the rest and adds the
request when it fits, or when nothing is held (a request larger than the whole budget runs
alone, as in `ImageComputeBudget`). Release removes the member.

- Waiting: requests of this process queue per deployment, taking turns between owners (API
  keys) round-robin (`fleetgate.multimodal.fair.FairShare`); only the head of that queue asks
  Redis, again after a short growing pause (5 ms up to 100 ms) while the budget is full. Order
  between processes is first come at a poll, not strict FIFO.
- Leases last ``lease_s`` and are renewed every third of it while held, so the tokens of a
  process that crashed (or lost its network) come back after at most ``lease_s``.
- Redis unreachable, slow (``timeout_s``) or failing: the request is admitted by this process's
  own `ImageComputeBudget` instead (logged, ``on_unavailable`` called), never refused for it;
  Redis is left alone for ``breaker_s`` before the next try.

Example::

    budget = SharedImageBudget(resources.redis.client(url), default_tokens_in_flight=8192)
    async with budget.admit("qwen-vl-a", image_tokens):
        ...  # send the request upstream
    await budget.aclose()
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from fleetgate.multimodal.fair import FairShare
from fleetgate.multimodal.images.budget import ImageComputeBudget

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["SharedImageBudget"]

log = logging.getLogger("fleetgate.multimodal")

_POLL_MIN_S = 0.005
_POLL_MAX_S = 0.1
_DOWN = (RedisError, OSError, TimeoutError)

# KEYS[1] the deployment's set; ARGV: member, tokens, capacity, lease (ms).
# Returns {1, held after} when admitted, {0, held} when the tokens do not fit.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  held = held + tonumber(string.match(m, '(%d+)$'))
end
local tokens = tonumber(ARGV[2])
if held > 0 and held + tokens > tonumber(ARGV[3]) then
  return {0, held}
end
local expires = now + tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], expires, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.max(expires, tonumber(last[2])) + 1000)
return {1, held + tokens}
"""

# KEYS[1] the deployment's set; ARGV: member, lease (ms). 1: renewed; 0: the lease had expired.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local expires = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', expires, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.max(expires, tonumber(last[2])) + 1000)
return 1
"""


def _member_tokens(member: object) -> int:
    """The tokens of a lease member (``<process>:<seq>:<tokens>``)."""
    text = member.decode() if isinstance(member, bytes) else str(member)
    return int(text.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class _Lease:
    deployment_id: str
    key: str
    member: str
    tokens: int


class SharedImageBudget:
    """`fleetgate.multimodal.images.budget.ImageBudget` over Redis (see the module docstring).

    ``redis``: a ``redis.asyncio.Redis`` client, normally ``resources.redis.client(url)``; its
    owner closes it. ``in_flight`` and ``waiting`` count this process's requests only;
    `held` reads the whole deployment's tokens from Redis.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        default_tokens_in_flight: int,
        max_images_per_request: int = 8,
        per_deployment: Mapping[str, int] | None = None,
        prefix: str = "fg:",
        lease_s: float = 60.0,
        timeout_s: float = 1.0,
        breaker_s: float = 1.0,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self.local = ImageComputeBudget(
            default_tokens_in_flight=default_tokens_in_flight,
            max_images_per_request=max_images_per_request,
            per_deployment=per_deployment,
        )
        self.max_images_per_request = max_images_per_request
        self.prefix = prefix
        self.lease_s = lease_s
        self.timeout_s = timeout_s
        self.breaker_s = breaker_s
        self._redis = redis
        self._on_unavailable = on_unavailable
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._process = os.urandom(6).hex()
        self._seq = itertools.count()
        self._gates: dict[str, FairShare] = {}
        self._waiting: dict[str, int] = {}
        self._held: dict[str, int] = {}
        self._down_until = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()

    def check_request(self, image_count: int, *, param: str | None = "messages") -> None:
        """Refuse a request carrying more images than allowed (400)."""
        self.local.check_request(image_count, param=param)

    def in_flight(self, deployment_id: str) -> int:
        """Image tokens this process holds on ``deployment_id`` (in Redis or, while Redis is
        unreachable, locally)."""
        return self._held.get(deployment_id, 0) + self.local.in_flight(deployment_id)

    def waiting(self, deployment_id: str) -> int:
        """Requests of this process queued for ``deployment_id``."""
        return self._waiting.get(deployment_id, 0) + self.local.waiting(deployment_id)

    def key(self, deployment_id: str) -> str:
        """The Redis key of ``deployment_id``'s leases."""
        return f"{self.prefix}imgbudget:{deployment_id}"

    async def held(self, deployment_id: str) -> int:
        """Image tokens every process together holds on ``deployment_id`` (unexpired leases)."""
        now_s, now_us = await self._redis.time()
        now_ms = now_s * 1000 + now_us // 1000
        members = await self._redis.zrangebyscore(self.key(deployment_id), f"({now_ms}", "+inf")
        return sum(_member_tokens(m) for m in members)

    @asynccontextmanager
    async def admit(
        self, deployment_id: str, image_tokens: int, *, owner: str = ""
    ) -> AsyncIterator[None]:
        """Hold ``image_tokens`` of ``deployment_id``'s budget for the body of the block."""
        lease = await self._enter(deployment_id, image_tokens, owner) if image_tokens > 0 else None
        if lease is None:  # nothing to hold (the local budget lets it in at once), or Redis down
            async with self.local.admit(deployment_id, image_tokens, owner=owner):
                yield
            return
        self._held[deployment_id] = self._held.get(deployment_id, 0) + lease.tokens
        keeper = asyncio.get_running_loop().create_task(self._keep(lease))
        try:
            yield
        finally:
            keeper.cancel()
            self._held[deployment_id] -= lease.tokens
            await self._release(lease)

    async def aclose(self) -> None:
        """Wait for the clean-ups still running (removal of leases whose grant was cut off)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _down(self) -> bool:
        return time.monotonic() < self._down_until

    def _unavailable(self, exc: BaseException) -> None:
        if not self._down():
            log.warning("image budget: Redis unavailable (%r); admitting per process", exc)
        self._down_until = time.monotonic() + self.breaker_s
        if self._on_unavailable is not None:
            self._on_unavailable()

    async def _enter(self, deployment_id: str, image_tokens: int, owner: str) -> _Lease | None:
        """A lease on the shared budget, or None: admit locally (Redis unavailable)."""
        if self._down():
            if self._on_unavailable is not None:
                self._on_unavailable()
            return None
        gate = self._gates.get(deployment_id)
        if gate is None:
            gate = self._gates[deployment_id] = FairShare("image budget", capacity=1)
        self._waiting[deployment_id] = self._waiting.get(deployment_id, 0) + 1
        try:
            async with gate.turn(owner):  # owners take turns; only the head asks Redis
                if self._down():
                    if self._on_unavailable is not None:
                        self._on_unavailable()
                    return None
                return await self._poll(deployment_id, image_tokens)
        finally:
            self._waiting[deployment_id] -= 1

    async def _poll(self, deployment_id: str, image_tokens: int) -> _Lease | None:
        capacity = self.local.capacity(deployment_id)
        tokens = min(image_tokens, capacity)
        key = self.key(deployment_id)
        member = f"{self._process}:{next(self._seq)}:{tokens}"
        args: list[str | int] = [member, tokens, capacity, int(self.lease_s * 1000)]
        pause = _POLL_MIN_S
        while True:
            try:
                async with asyncio.timeout(self.timeout_s):
                    admitted, _ = await self._acquire(keys=[key], args=args)
            except asyncio.CancelledError:
                self._spawn(self._forget(key, member))  # the script may have admitted it
                raise
            except _DOWN as exc:
                self._unavailable(exc)
                self._spawn(self._forget(key, member))
                return None
            if admitted:
                return _Lease(deployment_id, key, member, tokens)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)

    async def _keep(self, lease: _Lease) -> None:
        """Renew ``lease`` every third of its length while it is held."""
        lease_ms = int(self.lease_s * 1000)
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                async with asyncio.timeout(self.timeout_s):
                    kept = await self._renew(keys=[lease.key], args=[lease.member, lease_ms])
            except _DOWN as exc:
                log.warning("image budget: renewing a lease failed (%r)", exc)
                continue
            if not kept:
                log.warning("image budget: a lease on %s expired while held", lease.deployment_id)
                return

    async def _release(self, lease: _Lease) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._redis.zrem(lease.key, lease.member)
        except asyncio.CancelledError:
            self._spawn(self._forget(lease.key, lease.member))  # cancelled again meanwhile
            raise
        except _DOWN as exc:  # the lease expires on its own
            log.warning("image budget: releasing a lease failed (%r)", exc)

    async def _forget(self, key: str, member: str) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._redis.zrem(key, member)
        except _DOWN:
            pass  # the lease, if it was granted, expires on its own

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
