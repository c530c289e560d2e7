"""Canary splits: traffic percentages per deployment version of an alias, shared by replicas.

A split such as ``{"v1": 90, "v2": 10}`` makes the dispatcher send about 10% of an alias's
requests to its ``version: v2`` deployments. With ``sticky`` a caller (``x-user-id`` header,
else the key's user, else the key) always lands on the same version; versions take buckets in
name order, so raising the canary's share only moves callers onto it, never off it.

With Redis the split is written to the hash ``<prefix>canary:splits`` and announced on the
channel ``<prefix>canary:changed``; every replica reloads the hash on the message (and every
``refresh_interval_s`` as a safety net), so a change, or its rollback (the same call with the
old weights), reaches every replica within milliseconds. Without Redis it is this process only.

If no deployment of the chosen version is healthy, the request may use any version.

Example::

    splits = CanarySplits(redis=None)
    await splits.set("chat", Split({"v1": 90, "v2": 10}, sticky=True))
    dispatcher.versions = splits          # Dispatcher._candidates calls splits.narrow(...)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from fleetgate.errors import InvalidRequest, ServiceUnavailable
from fleetgate.routing.context import RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.tasks import cancel_and_wait, retry_forever

__all__ = ["CanarySplits", "Split"]

log = logging.getLogger("fleetgate.routing.canary")


@dataclass(frozen=True, slots=True)
class Split:
    """Percent of traffic per version (summing to 100), optionally sticky per caller."""

    weights: Mapping[str, float]
    sticky: bool = False
    revision: int = 0
    updated_at: float = 0.0
    _bounds: tuple[tuple[str, float], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.weights:
            raise InvalidRequest("'weights' must name at least one version", param="weights")
        if any(not isinstance(w, int | float) or w < 0 for w in self.weights.values()):
            raise InvalidRequest("each weight must be a number >= 0", param="weights")
        total = float(sum(self.weights.values()))
        if abs(total - 100.0) > 0.01:
            raise InvalidRequest(f"weights must add up to 100 (they add up to {total:g})",
                                 param="weights")  # fmt: skip
        upper, bounds = 0.0, []
        for version in sorted(self.weights):
            upper += float(self.weights[version])
            bounds.append((version, upper))
        object.__setattr__(self, "_bounds", tuple(bounds))

    def version_at(self, point: float) -> str:
        """The version owning ``point`` in [0, 100)."""
        for version, upper in self._bounds:
            if point < upper and self.weights[version] > 0:
                return version
        return max(self.weights, key=lambda v: self.weights[v])

    def to_dict(self) -> dict[str, Any]:
        return {"weights": dict(self.weights), "sticky": self.sticky,
                "revision": self.revision, "updated_at": self.updated_at}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Split:
        weights = raw.get("weights")
        if not isinstance(weights, dict):
            raise InvalidRequest("'weights' must be an object of version -> percent",
                                 param="weights")  # fmt: skip
        revision = raw.get("revision", 0)
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise InvalidRequest("'revision' must be an integer", param="revision")
        updated_at = raw.get("updated_at", 0.0)
        if isinstance(updated_at, bool) or not isinstance(updated_at, int | float):
            raise InvalidRequest("'updated_at' must be a number", param="updated_at")
        return cls(
            {str(k): v for k, v in weights.items()},
            sticky=bool(raw.get("sticky", False)),
            revision=revision,
            updated_at=float(updated_at),
        )


def _caller(ctx: RouteContext) -> str:
    user = ctx.request.headers.get("x-user-id")
    if user:
        return f"u:{user}"
    p = ctx.request.principal
    return f"u:{p.user_id}" if p.user_id else f"k:{p.key_id}"


class CanarySplits:
    """The live splits of this replica; the dispatcher asks it to narrow candidates.

    ``redis``: the process's shared redis-py client (``resources.redis.client(url)``), or None.
    """

    def __init__(
        self,
        redis: Redis | None = None,
        *,
        prefix: str = "fg:",
        refresh_interval_s: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.redis = redis
        self.key = f"{prefix}canary:splits"
        self.channel = f"{prefix}canary:changed"
        self.refresh_interval_s = refresh_interval_s
        self._rng = rng or random.Random()
        self._splits: dict[str, Split] = {}
        self._revision = 0
        self._task: asyncio.Task[None] | None = None

    def get(self, alias: str) -> Split | None:
        return self._splits.get(alias)

    def all(self) -> dict[str, Split]:
        return dict(self._splits)

    def choose(self, alias: str, ctx: RouteContext) -> str | None:
        """The version this request should use, or None when the alias has no split."""
        split = self._splits.get(alias)
        if split is None:
            return None
        caller = _caller(ctx) if split.sticky else ""
        if caller:
            digest = hashlib.sha256(f"{alias}\0{caller}".encode()).digest()
            point = int.from_bytes(digest[:8], "big") % 10_000 / 100
        else:
            point = self._rng.uniform(0, 100)
        return split.version_at(point)

    def narrow(
        self, alias: str, candidates: Sequence[Deployment], ctx: RouteContext
    ) -> list[Deployment]:
        """The candidates of the chosen version, or all of them if none of those is healthy."""
        version = self.choose(alias, ctx)
        if version is None:
            return list(candidates)
        now = time.monotonic()
        pinned = [d for d in candidates if d.version == version]
        if any(d.state.healthy(now) for d in pinned):
            return pinned
        return list(candidates)

    async def set(self, alias: str, split: Split) -> Split:
        """Store ``split`` for ``alias`` and tell every replica (`ServiceUnavailable` if not)."""
        if self.redis is None:
            self._revision += 1
            stored = Split(split.weights, split.sticky, self._revision, time.time())
            self._splits[alias] = stored
            return stored
        try:
            revision = int(await self.redis.incr(f"{self.key}:revision"))
            stored = Split(split.weights, split.sticky, revision, time.time())
            await self.redis.hset(self.key, alias, orjson.dumps(stored.to_dict()))
            await self.redis.publish(self.channel, alias)
        except (RedisError, OSError) as exc:
            raise ServiceUnavailable(f"Could not store the split in Redis: {exc}") from None
        self._splits[alias] = stored
        return stored

    async def clear(self, alias: str) -> None:
        """Remove the alias's split (every version by its strategy again)."""
        if self.redis is not None:
            try:
                await self.redis.hdel(self.key, alias)
                await self.redis.publish(self.channel, alias)
            except (RedisError, OSError) as exc:
                raise ServiceUnavailable(f"Could not clear the split in Redis: {exc}") from None
        self._splits.pop(alias, None)

    async def reload(self) -> None:
        """Replace the splits with Redis's (a bad entry is skipped and logged)."""
        if self.redis is None:
            return
        raw = await self.redis.hgetall(self.key)
        splits: dict[str, Split] = {}
        for name, value in raw.items():
            alias = name.decode() if isinstance(name, bytes) else str(name)
            try:
                splits[alias] = Split.from_dict(orjson.loads(value))
            except (InvalidRequest, ValueError, TypeError) as exc:
                log.warning("ignoring the stored split of %r: %s", alias, exc)
        self._splits = splits

    async def start(self) -> None:
        if self._task is None and self.redis is not None:
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="canary")

    async def aclose(self) -> None:
        """Stop following changes (the Redis client belongs to its owner, who closes it)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _listen(self) -> None:
        def interrupted(exc: Exception) -> None:
            log.warning("canary change feed interrupted (%s); reconnecting", exc)

        await retry_forever(self._session, interrupted, retry_s=0.5)

    async def _session(self) -> None:
        assert self.redis is not None
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(self.channel)
            await self.reload()  # anything missed while (re)connecting
            while True:
                message = await pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=self.refresh_interval_s
                )
                if message is None or message.get("type") == "message":
                    await self.reload()  # on a change, or as the periodic refresh
