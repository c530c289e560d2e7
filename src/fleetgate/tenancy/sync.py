"""Keep every replica's `KeyCache` current within a second of an admin change.

With Redis, a change is published on ``<prefix>tenancy:changed`` and every replica reloads on
the message (and after any reconnect, in case it missed one). The feed is pinged every second;
while it is down or silent, and always when there is no Redis, each replica instead runs a
cheap version query every ``poll_interval_s`` and reloads when the version moved, so a revoked
key stops working everywhere within a second even while Redis is away. While the feed is up the
version is still checked every ``backstop_s`` (5 s): replicas on another Redis (a second region
sharing the database) see a change within that. Either way the request path never waits on this.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from fleetgate.tasks import cancel_and_wait, retry_forever
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
        self._tasks: list[asyncio.Task[None]] = []
        self._reloading = asyncio.Lock()
        self.reloads = 0
        self.feed_up = False  # the Redis feed answered within the last few seconds
        self.feed_timeout_s = 3.0
        # the version is checked this often even while the feed is up: a change published on
        # another Redis (a second region sharing the database) or a missed message still lands
        self.backstop_s = 5.0

    async def start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._poll(), name="tenancy-poll"))
        if self.redis is not None:
            self._tasks.append(loop.create_task(self._listen(), name="tenancy-feed"))

    async def aclose(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()

    async def changed(self) -> None:
        """After a committed change: reload here, then tell every other replica."""
        await self._reload()
        if self.redis is not None:
            try:
                await self.redis.publish(self.channel, str(self.cache.snapshot.version))
            except (RedisError, OSError) as exc:
                log.warning("could not publish a tenancy change: %s", exc)

    async def _reload(self) -> None:
        async with self._reloading:  # the feed and the poll never load twice at once
            await self.cache.load()
            self.reloads += 1

    async def _poll(self) -> None:
        checked = time.monotonic()
        while True:
            await asyncio.sleep(self.poll_interval_s)
            if self.feed_up and time.monotonic() - checked < self.backstop_s:
                continue
            checked = time.monotonic()
            try:
                if await self.cache.version() != self.cache.snapshot.version:
                    await self._reload()
            except Exception as exc:  # the store may be away; keep serving from memory
                log.debug("tenancy version check failed: %s", exc)

    async def _listen(self) -> None:
        await retry_forever(self._session, self._interrupted, retry_s=0.5)

    async def _session(self) -> None:
        assert self.redis is not None
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(self.channel)
            await self._follow(pubsub)

    def _interrupted(self, exc: Exception) -> None:
        if self.feed_up:
            log.warning("tenancy change feed interrupted (%s); polling the store", exc)
        self.feed_up = False

    async def _follow(self, pubsub: PubSub) -> None:
        """Reload on each message; ping when idle; raise when the feed goes silent."""
        heard = time.monotonic()
        while True:
            message = await pubsub.get_message(timeout=1.0)
            now = time.monotonic()
            if message is None:
                if now - heard > self.feed_timeout_s:
                    raise ConnectionError("no answer from the change feed")
                await pubsub.ping()
                continue
            heard = now
            if not self.feed_up:
                self.feed_up = True
                await self._reload()  # anything missed while (re)connecting
            if message.get("type") == "message":
                await self._reload()
