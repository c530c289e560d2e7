"""Canary splits: traffic percentages per deployment version of an alias, shared by replicas.

A split such as ``{"v1": 90, "v2": 10}`` makes the dispatcher send about 10% of an alias's
requests to its ``version: v2`` deployments. With ``sticky`` a caller (``x-user-id`` header,
else the key's user, else the key) always lands on the same version; versions take buckets in
name order, so raising the canary's share only moves callers onto it, never off it.

A split is stored in the database (``fg_shared_state``, kind ``canary_splits``, one row per
alias) and every replica follows it through `fleetgate.resources.SharedStates`, so a change, or
its rollback (the same call with the old weights), reaches every replica and every worker within
a quarter of a second, with or without Redis, and survives restarts. Without a database (tests,
embedding) it is this process only.

If no deployment of the chosen version is healthy, the request may use any version.

Example::

    splits = CanarySplits(resources.shared, resources.databases.get(url, data_dir))
    await splits.start()                  # follows the stored splits
    await splits.set("chat", Split({"v1": 90, "v2": 10}, sticky=True))
    core.ports.provide(CANARY, splits)    # releases' version picker narrows with it after rollouts
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.errors import InvalidRequest
from fleetgate.resources.shared import SharedStates
from fleetgate.routing.context import RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.store.database import Database
from fleetgate.store.errors import not_stored
from fleetgate.store.fields import require_fits
from fleetgate.store.tables import shared_state

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
        # ``not 0 <= w <= 100`` also refuses NaN (every comparison with it is false) and inf
        if any(not isinstance(w, int | float) or not 0 <= w <= 100 for w in self.weights.values()):
            raise InvalidRequest("each weight must be a number from 0 to 100", param="weights")
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


SPLITS_KIND = "canary_splits"


class CanarySplits:
    """The live splits of this replica; the dispatcher asks it to narrow candidates.

    ``shared`` and ``database``: where splits are stored and followed (both None: this process
    only).
    """

    def __init__(
        self,
        shared: SharedStates | None = None,
        database: Database | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._shared = shared
        self._state = (
            shared.state(database, SPLITS_KIND)
            if shared is not None and database is not None
            else None
        )
        self._rng = rng or random.Random()
        self._splits: dict[str, Split] = {}
        self._revision = 0

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

    def retry_version(self, alias: str, failed: Deployment) -> str | None:
        """A canary split keeps a request's retries on the version it chose."""
        return None

    async def set(self, alias: str, split: Split) -> Split:
        """Store ``split`` for ``alias`` for every replica (`ServiceUnavailable` if not)."""
        require_fits(alias, shared_state.c.name, "alias")
        stored = Split(split.weights, split.sticky, self._revision + 1, time.time())
        if self._state is not None:
            try:
                revision = await self._state.put_stamped(
                    alias, lambda version: {**stored.to_dict(), "revision": version}
                )
            except Exception as exc:
                raise not_stored("the split was not changed", exc) from None
            stored = Split(split.weights, split.sticky, revision, stored.updated_at)
        self._revision = max(self._revision, stored.revision)
        self._splits[alias] = stored
        return stored

    async def clear(self, alias: str) -> None:
        """Remove the alias's split (every version by its strategy again)."""
        if self._state is not None:
            try:
                await self._state.delete(alias)
            except Exception as exc:
                raise not_stored("the split was not cleared", exc) from None
        self._splits.pop(alias, None)

    def replace(self, rows: dict[str, object]) -> None:
        """The stored splits changed (on any replica): follow them (a bad row is skipped)."""
        splits: dict[str, Split] = {}
        for alias, raw in rows.items():
            try:
                if not isinstance(raw, dict):
                    raise InvalidRequest("a split must be an object")
                splits[alias] = Split.from_dict(raw)
            except InvalidRequest as exc:
                log.warning("ignoring the stored split of %r: %s", alias, exc.message)
        self._splits = splits
        self._revision = max([self._revision, *(s.revision for s in splits.values())])

    @property
    def loaded(self) -> bool:
        """The stored splits were read (always true when splits are this process's only)."""
        if self._shared is None or self._state is None:
            return True
        return self._shared.loaded(self._state)

    async def start(self) -> None:
        """Load the stored splits and follow every later change."""
        if self._shared is not None and self._state is not None:
            await self._shared.follow(self._state, self.replace)

    async def aclose(self) -> None:
        """Nothing of its own to close (the poller belongs to the process's resources)."""
        return None
