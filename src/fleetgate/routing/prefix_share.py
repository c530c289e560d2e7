"""Share the prefix index between gateway replicas: what one sent where, every replica learns.

Each replica's `PrefixIndex` only knew the prompts it routed itself, so with N replicas behind
a load balancer a conversation's next turn found its engine's cache only one time in N. Now a
replica also publishes each routing record (engine, chained block hashes) on a Redis channel,
batched every ``flush_s``, and applies the records the other replicas publish to its own index.
Matching stays a local lookup: the request path never waits on Redis, and a replica that cannot
reach it keeps routing on what it knows (records are dropped, not queued without bound).

Channel ``{prefix}prefix:records``; a message is ``{"r": replica, "e": [[engine, [hash, ...]],
...]}`` (JSON; hashes are the index's 64-bit block hashes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import orjson

from fleetgate.routing.prefix import PrefixIndex
from fleetgate.tasks import cancel_and_wait, retry_forever

__all__ = ["PrefixShare"]

log = logging.getLogger("fleetgate.routing.prefix_share")


class PrefixShare:
    """Publishes this replica's prefix records and applies everyone else's.

    ``redis``: the process's shared redis-py client (``resources.redis.client(url)``); `aclose`
    leaves it open for its owner to close.
    """

    def __init__(
        self,
        redis: Any,
        replica_id: str,
        index: PrefixIndex,
        *,
        prefix: str = "fleetgate:routing:",
        flush_s: float = 0.05,
        max_buffered: int = 10_000,
    ) -> None:
        self.redis = redis
        self.replica_id = replica_id
        self.index = index
        self.channel = f"{prefix}prefix:records"
        self.flush_s = flush_s
        self.max_buffered = max_buffered
        self._buffer: list[tuple[str, list[int]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.applied = 0  # records received from other replicas
        self.dropped = 0  # records not published (Redis away, buffer full)

    def record(self, engine: str, hashes: Sequence[int]) -> None:
        """Queue a record of this replica for the next publish (never blocks)."""
        if not hashes:
            return
        if len(self._buffer) >= self.max_buffered:
            self.dropped += 1
            return
        self._buffer.append((engine, list(hashes)))

    async def start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._publish_loop(), name="prefix-share-publish"),
            loop.create_task(self._listen(), name="prefix-share-listen"),
        ]

    async def aclose(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()

    async def flush(self) -> None:
        """Publish what is buffered now."""
        batch, self._buffer = self._buffer, []
        if not batch:
            return
        message = orjson.dumps({"r": self.replica_id, "e": batch})
        try:
            await self.redis.publish(self.channel, message)
        except Exception as exc:  # Redis away: the others miss these records, routing goes on
            self.dropped += len(batch)
            log.debug("prefix records not shared: %s", exc)

    async def _publish_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()

    def apply(self, message: bytes) -> None:
        """Apply another replica's message to the local index (own messages are skipped)."""
        try:
            data = orjson.loads(message)
        except orjson.JSONDecodeError:
            return
        if not isinstance(data, dict) or data.get("r") == self.replica_id:
            return
        for item in data.get("e") or ():
            if (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[0], str)
                and isinstance(item[1], list)
            ):
                self.index.record(item[0], [h for h in item[1] if isinstance(h, int)])
                self.applied += 1

    async def _listen(self) -> None:
        def interrupted(exc: Exception) -> None:
            log.debug("prefix record feed interrupted (%s); reconnecting", exc)

        await retry_forever(self._session, interrupted, retry_s=1.0)

    async def _session(self) -> None:
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(self.channel)
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    self.apply(message["data"])
