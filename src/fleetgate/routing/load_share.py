"""Share each gateway replica's in-flight counts through Redis, so every replica routes on all.

Each replica writes its `LocalLoad` per deployment to its own hash (expiring after ``ttl_s``)
and registers itself in a sorted set scored by the write time; readers sum the hashes of the
other replicas that wrote within ``ttl_s``. One pipelined round trip per publish and one per
read, at the scrape interval.

Keys: ``{prefix}:replicas`` (sorted set) and ``{prefix}:r:{replica_id}`` (hash of
deployment key -> ``"prefilling,prefill_tokens,decoding"``).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from fleetgate.routing.load import LocalLoad

__all__ = ["LoadShare", "RedisLoadShare"]


class LoadShare(Protocol):
    """Where replicas publish their loads and read everyone else's."""

    async def publish(self, loads: dict[str, LocalLoad]) -> None: ...

    async def others(self) -> dict[str, LocalLoad]: ...

    async def aclose(self) -> None: ...


def _encode(load: LocalLoad) -> str:
    return f"{load.prefilling},{load.prefill_tokens},{load.decoding}"


def _decode(raw: Any) -> LocalLoad | None:
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    parts = text.split(",")
    if len(parts) != 3:
        return None
    try:
        return LocalLoad(int(parts[0]), int(parts[1]), int(parts[2]))
    except ValueError:
        return None


class RedisLoadShare:
    """`LoadShare` over a ``redis.asyncio`` client (shared with other users of Redis).

    ``client``: the process's shared client (``resources.redis.client(url)``); `aclose`
    withdraws this replica but leaves the client to its owner.
    """

    def __init__(
        self,
        client: Any,
        replica_id: str,
        *,
        ttl_s: float = 2.0,
        prefix: str = "fleetgate:routing:load",
    ) -> None:
        self._redis = client
        self.replica_id = replica_id
        self.ttl_s = ttl_s
        self._prefix = prefix

    def _key(self, replica: str) -> str:
        return f"{self._prefix}:r:{replica}"

    async def publish(self, loads: dict[str, LocalLoad]) -> None:
        """Replace this replica's published counts with ``loads``."""
        key = self._key(self.replica_id)
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(key)
        if loads:
            pipe.hset(key, mapping={k: _encode(v) for k, v in loads.items()})
            pipe.pexpire(key, int(self.ttl_s * 1000))
        pipe.zadd(f"{self._prefix}:replicas", {self.replica_id: time.time()})
        await pipe.execute()

    async def others(self) -> dict[str, LocalLoad]:
        """The summed counts of every other live replica, per deployment key."""
        replicas_key = f"{self._prefix}:replicas"
        now = time.time()
        await self._redis.zremrangebyscore(replicas_key, "-inf", now - 10 * self.ttl_s)
        members = await self._redis.zrangebyscore(replicas_key, now - self.ttl_s, "+inf")
        names = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        names = [n for n in names if n != self.replica_id]
        if not names:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(self._key(name))
        out: dict[str, LocalLoad] = {}
        for mapping in await pipe.execute():
            for raw_key, raw in (mapping or {}).items():
                load = _decode(raw)
                if load is None:
                    continue
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                out[key] = out[key].add(load) if key in out else load
        return out

    async def aclose(self) -> None:
        """Withdraw this replica (the client stays open: its owner closes it)."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(self._key(self.replica_id))
        pipe.zrem(f"{self._prefix}:replicas", self.replica_id)
        await pipe.execute()
