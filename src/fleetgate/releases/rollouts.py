"""`RolloutStore`: progressive rollouts, one per alias at a time, in the database.

A rollout moves an alias that follows a registry stage from its ``baseline`` (the version at
production when it started) to a ``candidate`` through ``steps`` of traffic percent. Every
change is a compare-and-set on ``revision`` and bumps the registry's change counter in the same
transaction, so every replica applies it at its next poll (`fleetgate.releases.follow`).
Which replica drives a rollout is decided by a lease on the row (``owner``,
``lease_until_ms``): the holder renews it every tick; when it dies, another takes over once the
lease has run out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from fleetgate.errors import Conflict, NotFound
from fleetgate.releases.registry import bump_counter
from fleetgate.releases.tables import rollouts
from fleetgate.store.database import Database
from fleetgate.store.rows import at_revision, now_ms, take_lease

__all__ = ["ACTIVE", "Rollout", "RolloutStore"]

ACTIVE = ("running", "paused")


@dataclass(frozen=True)
class Rollout:
    alias: str
    model: str
    baseline: str
    candidate: str
    steps: list[float]
    step: int
    percent: float
    status: str
    interval_s: float
    min_samples: int
    step_started_ms: int
    reason: str | None
    owner: str | None
    lease_until_ms: int
    revision: int
    started_ms: int
    updated_ms: int
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(r: Any) -> Rollout:
    return Rollout(
        r.alias, r.model, r.baseline, r.candidate, list(r.steps), r.step, r.percent, r.status,
        r.interval_s, r.min_samples, r.step_started_ms, r.reason, r.owner, r.lease_until_ms,
        r.revision, r.started_ms, r.updated_ms, list(r.decisions or []),
    )  # fmt: skip


@dataclass(eq=False, repr=False)
class RolloutStore:
    db: Database
    _: KW_ONLY
    clock: Callable[[], int] = now_ms

    async def start(
        self,
        *,
        alias: str,
        model: str,
        baseline: str,
        candidate: str,
        steps: list[float],
        interval_s: float,
        min_samples: int,
    ) -> Rollout:
        """A new running rollout at ``steps[0]`` (409 while another is active on the alias)."""
        now = self.clock()
        row = {
            "alias": alias, "model": model, "baseline": baseline, "candidate": candidate,
            "steps": steps, "step": 0, "percent": steps[0], "status": "running",
            "interval_s": interval_s, "min_samples": min_samples, "step_started_ms": now,
            "reason": None, "owner": None, "lease_until_ms": 0, "revision": 1,
            "decisions": [], "started_ms": now, "updated_ms": now,
        }  # fmt: skip
        try:
            async with self.db.engine.begin() as conn:
                old = (
                    await conn.execute(select(rollouts).where(rollouts.c.alias == alias))
                ).first()
                if old is not None and old.status in ACTIVE:
                    raise Conflict(
                        f"The alias '{alias}' has a {old.status} rollout to '{old.candidate}'; "
                        "abort it first.",
                        code="rollout_active",
                    )
                if old is not None:
                    await conn.execute(
                        delete(rollouts).where(
                            rollouts.c.alias == alias, rollouts.c.revision == old.revision
                        )
                    )
                await conn.execute(insert(rollouts).values(**row))
                await bump_counter(conn)
        except IntegrityError:
            raise Conflict(f"Another rollout of '{alias}' started at the same time.") from None
        return await self.get(alias)

    async def get(self, alias: str) -> Rollout:
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(select(rollouts).where(rollouts.c.alias == alias))).first()
        if row is None:
            raise NotFound(f"The alias '{alias}' has no rollout.", param="alias")
        return _row(row)

    async def all(self) -> list[Rollout]:
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(select(rollouts).order_by(rollouts.c.alias))).all()
        return [_row(r) for r in rows]

    async def change(self, current: Rollout, **values: Any) -> Rollout | None:
        """Apply ``values`` if the rollout is still at ``current.revision``; None if it moved."""
        key = rollouts.c.alias == current.alias
        async with self.db.engine.begin() as conn:
            moved = await conn.execute(
                at_revision(rollouts, current.revision, self.clock(), values, key)
            )
            if moved.rowcount != 1:
                return None
            await bump_counter(conn)
        return await self.get(current.alias)

    async def lease(self, alias: str, owner: str, lease_s: float) -> bool:
        """Take or renew the lease of driving ``alias``'s rollout; True when held."""
        key = rollouts.c.alias == alias
        async with self.db.engine.begin() as conn:
            held = await conn.execute(take_lease(rollouts, owner, self.clock(), lease_s, key))
        return held.rowcount == 1
