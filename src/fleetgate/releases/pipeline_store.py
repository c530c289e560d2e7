"""`PipelineStore`: the release pipeline's runs, one per registered version, in the database
(table ``fg_release_pipelines``, migration ``0014``).

A run's ``steps`` is the list of steps done or under way, each
``{"name", "status": running|done|failed, "started_ms", "finished_ms", "detail"}``: a restarted
gateway resumes from the last step marked ``done``. ``engines`` holds what the launchers
started (``eval``: the temporary instance, ``production``), so a replica that takes over can
check and stop them. Every change is a compare-and-set on ``revision``; the replica driving a
run holds a lease on its row (``owner``, ``lease_until_ms``), as rollouts do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Index,
    Integer,
    String,
    Table,
    insert,
    select,
)
from sqlalchemy.exc import IntegrityError

from fleetgate.errors import Conflict, NotFound
from fleetgate.store.database import Database
from fleetgate.store.rows import at_revision, now_ms, take_lease
from fleetgate.store.tables import metadata

__all__ = ["ACTIVE", "Pipeline", "PipelineStore", "pipelines"]

ACTIVE = ("running",)

pipelines = Table(
    "fg_release_pipelines",
    metadata,
    Column("model", String(64), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("alias", String(200), nullable=False),
    # running, then: released (promoted), passed (gate passed, no rollout by policy),
    # stopped (stopped at the gate), rolled_back, failed (a step failed)
    Column("status", String(32), nullable=False),
    Column("steps", JSON, nullable=False),
    Column("engines", JSON, nullable=False),
    Column("gate", JSON),
    Column("reason", String(2000)),
    Column("owner", String(64)),
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_fg_release_pipelines_status", "status"),
)


@dataclass(frozen=True)
class Pipeline:
    model: str
    version: str
    alias: str
    status: str
    steps: list[dict[str, Any]]
    engines: dict[str, Any]
    gate: dict[str, Any] | None
    reason: str | None
    owner: str | None
    lease_until_ms: int
    revision: int
    created_ms: int
    updated_ms: int
    extra: dict[str, Any] = field(default_factory=dict)

    def done(self, name: str) -> dict[str, Any] | None:
        """The step ``name`` if it finished (its record), else None."""
        for step in self.steps:
            if step["name"] == name and step["status"] == "done":
                return step
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("extra")
        return data


def _row(r: Any) -> Pipeline:
    return Pipeline(
        r.model, r.version, r.alias, r.status, list(r.steps or []), dict(r.engines or {}),
        r.gate, r.reason, r.owner, r.lease_until_ms, r.revision, r.created_ms, r.updated_ms,
    )  # fmt: skip


class PipelineStore:
    def __init__(self, db: Database, *, clock: Callable[[], int] = now_ms) -> None:
        self.db = db
        self.clock = clock

    async def create(self, model: str, version: str, alias: str) -> Pipeline:
        """A new running pipeline for ``model``'s ``version`` (409 if the version has one)."""
        now = self.clock()
        row: dict[str, Any] = {
            "model": model, "version": version, "alias": alias, "status": "running",
            "steps": [], "engines": {}, "gate": None, "reason": None, "owner": None,
            "lease_until_ms": 0, "revision": 1, "created_ms": now, "updated_ms": now,
        }  # fmt: skip
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(insert(pipelines).values(**row))
        except IntegrityError:
            raise Conflict(
                f"'{model}' version '{version}' already has a pipeline run.",
                code="pipeline_exists",
            ) from None
        return await self.get(model, version)

    async def get(self, model: str, version: str) -> Pipeline:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(pipelines).where(
                        pipelines.c.model == model, pipelines.c.version == version
                    )
                )
            ).first()
        if row is None:
            raise NotFound(f"'{model}' version '{version}' has no pipeline run.", param="version")
        return _row(row)

    async def all(self, model: str | None = None, *, status: str | None = None) -> list[Pipeline]:
        query = select(pipelines).order_by(pipelines.c.created_ms, pipelines.c.version)
        if model is not None:
            query = query.where(pipelines.c.model == model)
        if status is not None:
            query = query.where(pipelines.c.status == status)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_row(r) for r in rows]

    async def change(self, current: Pipeline, **values: Any) -> Pipeline | None:
        """Apply ``values`` if the run is still at ``current.revision``; None if it moved."""
        key = (pipelines.c.model == current.model, pipelines.c.version == current.version)
        async with self.db.engine.begin() as conn:
            moved = await conn.execute(
                at_revision(pipelines, current.revision, self.clock(), values, *key)
            )
        if moved.rowcount != 1:
            return None
        return await self.get(current.model, current.version)

    async def lease(self, model: str, version: str, owner: str, lease_s: float) -> bool:
        """Take or renew the lease of driving the run; True when held."""
        key = (pipelines.c.model == model, pipelines.c.version == version)
        async with self.db.engine.begin() as conn:
            held = await conn.execute(take_lease(pipelines, owner, self.clock(), lease_s, *key))
        return held.rowcount == 1
