"""Who leads among several picker replicas: a lease key in the Redis fleetgate shares.

The Endpoint Picker Protocol's readiness means "synced and leader": with several replicas only
the leader is ready, the others stay alive (liveness) and take over when its lease lapses.
One Redis key holds the leader's id for ``ttl_s``; the leader renews it every third of that,
a follower tries to take it as often. Renewal and release are compare-and-set (Lua), so a
replica never extends or deletes a lease another one holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from typing import Any

from fleetgate.tasks import RunsInBackground, periodic

__all__ = ["LeaderLease"]

log = logging.getLogger("fleetgate.epp.lease")

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class LeaderLease(RunsInBackground):
    """A lease on ``key`` in ``redis`` (a redis-py asyncio client) for ``ttl_s`` seconds.

    ``on_change(leader)`` is called whenever this replica becomes or stops being the leader
    (a Redis error counts as not leading: a replica that cannot renew must not stay ready).

    Example::

        lease = LeaderLease(redis, "fleetgate:epp:pool-a", ttl_s=10, on_change=print)
        await lease.start()
    """

    def __init__(
        self,
        redis: Any,
        key: str,
        *,
        ttl_s: float = 10.0,
        on_change: Callable[[bool], None] = lambda leader: None,
        owner: str | None = None,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self._redis = redis
        self.key = key
        self.ttl_s = ttl_s
        self.owner = owner or secrets.token_hex(8)
        self._on_change = on_change
        self.leader = False
        # one bounded step per third of the lease, until aclose
        self._task = periodic(
            lambda: self.ttl_s / 3,
            self.step,
            log,
            f"epp lease {key}: step failed",
            name=f"epp-lease-{key}",
        )

    async def step(self) -> bool:
        """Take or renew the lease once; True while this replica leads."""
        try:
            async with asyncio.timeout(self.ttl_s / 3):
                held = await self._redis.eval(
                    _RENEW, 1, self.key, self.owner, int(self.ttl_s * 1000)
                )
        except Exception as exc:  # Redis down or slow: not leading until it answers again
            log.warning("epp lease %s: %s", self.key, exc)
            held = 0
        self._set(bool(held))
        return self.leader

    def _set(self, leader: bool) -> None:
        if leader != self.leader:
            self.leader = leader
            log.info("epp lease %s: %s", self.key, "leader" if leader else "follower")
            self._on_change(leader)

    async def start(self) -> None:
        await self.step()
        await super().start()

    async def aclose(self) -> None:
        await super().aclose()
        if self.leader:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self._redis.eval(_RELEASE, 1, self.key, self.owner)
        self._set(False)
