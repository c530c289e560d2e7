"""Where the exact cache keeps answers: Redis (shared by every replica) or this process.

Both are `ExactStore`s: ``get`` and ``put`` by key, with a time to live. A store that fails
(Redis away) answers a miss and drops the write: a cache never fails a request.

Example::

    store = MemoryExactStore(max_entries=10_000)
    await store.put("k", b"answer", ttl_s=60)
    assert await store.get("k") == b"answer"
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["ExactStore", "MemoryExactStore", "RedisExactStore"]

log = logging.getLogger("fleetgate.cache")


class ExactStore(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...


class MemoryExactStore:
    """A bounded LRU with a TTL per entry, in this process."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[1]

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        self._entries[key] = (self._clock() + ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class RedisExactStore:
    """Entries as Redis strings with an expiry (``SET ... PX``), under ``prefix``."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self.client.get(self.prefix + key)
        except Exception as exc:  # redis-py's errors, timeouts, a closed pool: all a miss
            log.debug("response cache: Redis read failed: %s", exc)
            return None
        return value if isinstance(value, bytes) else None

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        try:
            await self.client.set(self.prefix + key, value, px=max(1, int(ttl_s * 1000)))
        except Exception as exc:
            log.debug("response cache: Redis write failed: %s", exc)
