"""The key cache's version backstop: while the Redis change feed is up, a change published on
another Redis (a second region sharing the database) still reaches this replica, by the
version check every ``backstop_s``; not sooner, so the feed keeps the store quiet."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

from fleetgate.tenancy.cache import KeyCache
from fleetgate.tenancy.sync import CacheSync


@dataclass
class _Snap:
    version: int = 0


@dataclass
class _Cache:
    """The store's version and what the replica loaded (a KeyCache's two faces here)."""

    stored: int = 0
    snapshot: _Snap = field(default_factory=_Snap)
    checks: int = 0

    async def version(self) -> int:
        self.checks += 1
        return self.stored

    async def load(self) -> None:
        self.snapshot = _Snap(self.stored)


async def test_a_change_on_another_redis_lands_within_the_backstop() -> None:
    cache = _Cache()
    sync = CacheSync(cast(KeyCache, cache), None, poll_interval_s=0.02)
    sync.backstop_s = 0.3
    sync.feed_up = True  # as if this region's feed were healthy (and silent about the change)
    await sync.start()
    try:
        cache.stored = 7  # committed by a replica of the other region
        await asyncio.sleep(0.15)
        assert cache.snapshot.version == 0 and cache.checks == 0, "checked while the feed is up"
        for _ in range(100):
            if cache.snapshot.version == 7:
                break
            await asyncio.sleep(0.02)
        assert cache.snapshot.version == 7, "the backstop never reloaded"
    finally:
        await sync.aclose()
