"""Keep every replica's `KeyCache` current within a second of an admin change.

With Redis: a change publishes on ``<prefix>tenancy:changed`` and every replica reloads on the
message (and once more after any reconnect, in case it missed one). Without Redis (one
process, or replicas sharing only the database): a cheap version query every
``poll_interval_s``. Either way the request path never waits on this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from fleetgate.tenancy.cache import KeyCache

__all__ = ["CacheSync"]

log = logging.getLogger("fleetgate.tenancy.sync")


class CacheSync:
    """Background reloads of a `KeyCache`; ``changed()`` tells the other replicas."""

    def __init__(
        self,
        cache: KeyCache,
        redis: Redis | None = None,
        *,
        prefix: str = "fg:",
        poll_interval_s: float = 0.5,
    ) -> None:
        self.cache = cache
        self.redis = redis
        self.channel = f"{prefix}tenancy:changed"
        self.poll_interval_s = poll_interval_s
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0

    def start(self) -> None:
        if self._task is None:
            loop = self._listen() if self.redis is not None else self._poll()
            self._task = asyncio.get_running_loop().create_task(loop, name="tenancy-sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def changed(self) -> None:
        """After a committed change: reload here, then tell every other replica."""
        await self._reload()
        if self.redis is not None:
            try:
                await self.redis.publish(self.channel, str(self.cache.snapshot.version))
            except (RedisError, OSError) as exc:
                log.warning("could not publish a tenancy change: %s", exc)

    async def _reload(self) -> None:
        await self.cache.load()
        self.reloads += 1

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                if await self.cache.version() != self.cache.snapshot.version:
                    await self._reload()
            except Exception as exc:  # the store may be away; keep serving from memory
                log.debug("tenancy version check failed: %s", exc)

    async def _listen(self) -> None:
        assert self.redis is not None
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    await self._reload()  # anything missed while (re)connecting
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            await self._reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("tenancy change feed interrupted (%s); reconnecting", exc)
                await asyncio.sleep(0.5)
