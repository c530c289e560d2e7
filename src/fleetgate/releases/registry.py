"""`Registry`: models, immutable versions, and stage aliases moved by compare-and-set.

A stage (``staging``, ``production``, ``previous``, or any custom name) is one row holding a
version; it moves only by ``UPDATE ... WHERE version IS NOT DISTINCT FROM :expected``, so of two
promotions racing from the same state exactly one moves it. Every move appends one row per
operation to the history (never updated), and bumps the registry's change counter in the same
transaction; each replica polls that counter (`fleetgate.releases.follow`).

Semantics of ``promote`` (docs/releases.md):

- with ``expected`` (``None`` = the stage is empty): strict compare-and-set; if the stage holds
  something else the call raises `Conflict` (409) and nothing changes;
- without it: the promotions are serialised; each reads the stage, then compare-and-sets from
  what it read, retrying when another one moved it in between. Two at once both land, one
  after the other, each with its own history entry, and one version is left at the stage.

Promoting to ``production`` moves the version it replaces to ``previous`` and applies
retention: the last ``retention`` versions that were production stay ``ready``, older ones
that no stage holds are ``archived`` (no longer served or promotable).

Example::

    registry = Registry(db, retention=3)
    await registry.create_model(ModelSpec(name="chat"))
    await registry.register("chat", VersionSpec(artifact_uri="s3://m/1", deployments=[...]))
    moves = await registry.promote("chat", "production", "v1", actor="master")

Why one module: `Registry` is one repository over the registry's four tables, and its point is
that every write is one transaction of the same shape: the compare-and-set on the stage row,
the ``previous`` move, a history row, retention and the change-counter bump (`_move_once`).
Reads and writes share the private queries used inside those transactions (`_stages`,
`_find_version`, `_require_model`), and `serving_view` reads back exactly what the moves write.
Split into a read module and a write module, those helpers would be shared across both and the
transaction rules above would be stated in one file and carried out in another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.errors import Conflict, InvalidRequest, NotFound
from fleetgate.releases.records import (
    DEFAULT_STAGES,
    HistoryEntry,
    ModelSpec,
    Move,
    VersionSpec,
)
from fleetgate.releases.tables import registry_history as history_t
from fleetgate.releases.tables import registry_models as models_t
from fleetgate.releases.tables import registry_stages as stages_t
from fleetgate.releases.tables import registry_versions as versions_t
from fleetgate.store.database import Database
from fleetgate.store.rows import now_ms
from fleetgate.store.tables import shared_versions

__all__ = ["UNSET", "Registry", "ServingView", "bump_counter"]

PRODUCTION, PREVIOUS = "production", "previous"
_ATTEMPTS = 50  # serialised promotions retry this often before giving up with a 409


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # ``expected`` not given: serialise instead of compare-and-set


@dataclass(frozen=True)
class ServingView:
    """What the replicas serve: each model's stages and each ready version's deployments."""

    counter: int
    stages: dict[str, dict[str, str | None]]
    deployments: dict[tuple[str, str], list[dict[str, Any]]]


async def bump_counter(conn: AsyncConnection) -> None:
    """Move the registry's change counter (in the caller's transaction): every replica reads
    the registry again at its next poll."""
    await conn.execute(
        update(shared_versions)
        .where(shared_versions.c.kind == "registry")
        .values(version=shared_versions.c.version + 1)
    )


def _version_dict(row: Any) -> dict[str, Any]:
    return {
        "model": row.model,
        "version": row.version,
        "seq": row.seq,
        "artifact_uri": row.artifact_uri,
        "tokenizer": row.tokenizer,
        "tensor_parallel": row.tensor_parallel,
        "max_model_len": row.max_model_len,
        "quantization": row.quantization,
        "parent_version": row.parent_version,
        "card": row.card,
        "deployments": row.deployments,
        "status": row.status,
        "created_ms": row.created_ms,
    }


class Registry:
    """The model registry over one `Database` (SQLite or PostgreSQL)."""

    def __init__(
        self, db: Database, *, retention: int = 3, clock: Callable[[], int] = now_ms
    ) -> None:
        self.db = db
        self.retention = retention
        self._clock = clock

    # -- models and versions ---------------------------------------------------------------

    async def create_model(self, spec: ModelSpec) -> dict[str, Any]:
        now = self._clock()
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    insert(models_t).values(
                        name=spec.name, description=spec.description, created_ms=now
                    )
                )
                await conn.execute(
                    insert(stages_t),
                    [{"model": spec.name, "stage": s, "updated_ms": now} for s in DEFAULT_STAGES],
                )
                await self._bump(conn)
        except IntegrityError:
            raise Conflict(f"The model '{spec.name}' already exists.", param="name") from None
        return {"name": spec.name, "description": spec.description, "created_ms": now}

    async def register(self, model: str, spec: VersionSpec) -> dict[str, Any]:
        """Add an immutable version (named ``v<seq>`` unless ``spec.version`` names it)."""
        for _ in range(_ATTEMPTS):
            try:
                return await self._register_once(model, spec)
            except IntegrityError:
                if spec.version is not None and await self._find_version(model, spec.version):
                    break
                continue  # two registrations took the same sequence number: take the next
        raise Conflict(f"The version '{spec.version}' of '{model}' already exists.")

    async def _register_once(self, model: str, spec: VersionSpec) -> dict[str, Any]:
        async with self.db.engine.begin() as conn:
            await self._require_model(conn, model)
            seq = 1 + int(
                (
                    await conn.execute(
                        select(func.coalesce(func.max(versions_t.c.seq), 0)).where(
                            versions_t.c.model == model
                        )
                    )
                ).scalar_one()
            )
            name = spec.version or f"v{seq}"
            if await self._find_version(model, name, conn):
                raise Conflict(f"The version '{name}' of '{model}' exists.", param="version")
            if spec.parent_version and not await self._find_version(
                model, spec.parent_version, conn
            ):
                raise InvalidRequest(
                    f"The parent version '{spec.parent_version}' of '{model}' does not exist.",
                    param="parent_version",
                )
            row = {
                "model": model,
                "version": name,
                "seq": seq,
                "artifact_uri": spec.artifact_uri,
                "tokenizer": spec.tokenizer,
                "tensor_parallel": spec.tensor_parallel,
                "max_model_len": spec.max_model_len,
                "quantization": spec.quantization,
                "parent_version": spec.parent_version,
                "card": spec.card,
                "deployments": [
                    d.model_dump(mode="json", exclude_defaults=True) for d in spec.deployments
                ],
                "status": "ready",
                "created_ms": self._clock(),
            }
            await conn.execute(insert(versions_t).values(**row))
            await self._bump(conn)
        return row

    async def models(self) -> list[dict[str, Any]]:
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(select(models_t).order_by(models_t.c.name))).all()
            stages = (await conn.execute(select(stages_t))).all()
        by_model: dict[str, dict[str, str | None]] = {}
        for s in stages:
            by_model.setdefault(s.model, {})[s.stage] = s.version
        return [
            {"name": r.name, "description": r.description, "created_ms": r.created_ms,
             "stages": by_model.get(r.name, {})}
            for r in rows
        ]  # fmt: skip

    async def model(self, name: str) -> dict[str, Any]:
        """The model, its stages and its versions (newest first)."""
        async with self.db.engine.connect() as conn:
            row = await self._require_model(conn, name)
            stages = await self._stages(conn, name)
            versions = (
                await conn.execute(
                    select(versions_t)
                    .where(versions_t.c.model == name)
                    .order_by(versions_t.c.seq.desc())
                )
            ).all()
        return {
            "name": row.name,
            "description": row.description,
            "created_ms": row.created_ms,
            "stages": stages,
            "versions": [_version_dict(v) for v in versions],
        }

    async def version(self, model: str, version: str) -> dict[str, Any]:
        row = await self._find_version(model, version)
        if row is None:
            raise NotFound(f"The model '{model}' has no version '{version}'.", param="version")
        return _version_dict(row)

    async def stages(self, model: str) -> dict[str, str | None]:
        async with self.db.engine.connect() as conn:
            await self._require_model(conn, model)
            return await self._stages(conn, model)

    # -- stage moves -------------------------------------------------------------------------

    async def promote(
        self,
        model: str,
        stage: str,
        version: str,
        *,
        actor: str,
        expected: str | None = UNSET,
        detail: dict[str, Any] | None = None,
    ) -> list[Move]:
        """Move ``stage`` to ``version`` (see the module docstring); [] if it was there."""
        row = await self.version(model, version)
        if row["status"] != "ready":
            raise Conflict(
                f"The version '{version}' of '{model}' is {row['status']}; register a new one.",
                code="version_archived",
            )
        await self.db.insert_ignore(
            stages_t, [{"model": model, "stage": stage, "updated_ms": self._clock()}]
        )
        return await self._move(model, stage, version, "promote", actor, expected, detail or {})

    async def rollback(
        self,
        model: str,
        *,
        actor: str,
        expected: str | None = UNSET,
        detail: dict[str, Any] | None = None,
    ) -> list[Move]:
        """Production goes back to ``previous``; the version rolled back from becomes
        ``previous`` (so a second rollback undoes the first)."""
        stages = await self.stages(model)
        target = stages.get(PREVIOUS)
        if target is None:
            raise Conflict(f"The model '{model}' has no previous version to roll back to.")
        return await self._move(
            model, PRODUCTION, target, "rollback", actor, expected, detail or {}
        )

    async def _move(
        self,
        model: str,
        stage: str,
        version: str,
        action: str,
        actor: str,
        expected: str | None,
        detail: dict[str, Any],
    ) -> list[Move]:
        strict = expected is not UNSET
        for _ in range(_ATTEMPTS):
            current = expected if strict else (await self.stages(model)).get(stage)
            if current == version:
                # already there: nothing to do, unless the caller's expectation is stale (the
                # stage holds something else): then it is the conflict below, not a success
                if strict and (await self.stages(model)).get(stage) != version:
                    break
                return []
            async with self.db.engine.begin() as conn:
                moves = await self._move_once(
                    conn, model, stage, current, version, action, actor, detail
                )
            if moves is not None:
                return moves
            if strict:
                break
        now = (await self.stages(model)).get(stage)
        raise Conflict(
            f"The stage '{stage}' of '{model}' holds {now!r}, not {expected!r} as expected."
            if strict
            else f"The stage '{stage}' of '{model}' kept moving; try again.",
            param="expected",
        )

    async def _move_once(
        self,
        conn: AsyncConnection,
        model: str,
        stage: str,
        current: str | None,
        version: str,
        action: str,
        actor: str,
        detail: dict[str, Any],
    ) -> list[Move] | None:
        """One compare-and-set attempt in ``conn``'s transaction; None when it lost. The
        UPDATE is the transaction's first statement, so SQLite takes the write lock first."""
        now = self._clock()
        moved = await conn.execute(
            update(stages_t)
            .where(stages_t.c.model == model, stages_t.c.stage == stage)
            .where(stages_t.c.version.is_not_distinct_from(current))
            .values(version=version, updated_ms=now)
        )
        if moved.rowcount != 1:
            return None
        moves = [Move(stage, current, version)]
        if stage == PRODUCTION and current is not None:
            old = (await self._stages(conn, model)).get(PREVIOUS)
            await conn.execute(
                update(stages_t)
                .where(stages_t.c.model == model, stages_t.c.stage == PREVIOUS)
                .values(version=current, updated_ms=now)
            )
            moves.append(Move(PREVIOUS, old, current))
        record = {
            **detail,
            "moves": [m.__dict__ for m in moves],
        }
        await conn.execute(
            insert(history_t).values(
                model=model, stage=stage, action=action, from_version=current,
                to_version=version, actor=actor, detail=record, created_ms=now,
            )
        )  # fmt: skip
        if stage == PRODUCTION:
            await self._retain(conn, model)
        await self._bump(conn)
        return moves

    async def _retain(self, conn: AsyncConnection, model: str) -> None:
        """Archive versions that were production before the last ``retention`` ones."""
        rows = (
            await conn.execute(
                select(history_t.c.to_version)
                .where(history_t.c.model == model, history_t.c.stage == PRODUCTION)
                .order_by(history_t.c.id.desc())
            )
        ).all()
        recent: list[str] = []
        for (v,) in rows:
            if v is not None and v not in recent:
                recent.append(v)
        held = {v for v in (await self._stages(conn, model)).values() if v is not None}
        old = [v for v in recent[self.retention :] if v not in held]
        if old:
            await conn.execute(
                update(versions_t)
                .where(versions_t.c.model == model, versions_t.c.version.in_(old))
                .where(versions_t.c.status == "ready")
                .values(status="archived")
            )

    async def history(self, model: str, limit: int = 100) -> list[HistoryEntry]:
        async with self.db.engine.connect() as conn:
            await self._require_model(conn, model)
            rows = (
                await conn.execute(
                    select(history_t)
                    .where(history_t.c.model == model)
                    .order_by(history_t.c.id.desc())
                    .limit(limit)
                )
            ).all()
        return [
            HistoryEntry(r.id, r.model, r.stage, r.action, r.from_version, r.to_version,
                         r.actor, r.created_ms, dict(r.detail or {}))
            for r in rows
        ]  # fmt: skip

    # -- what replicas follow ------------------------------------------------------------------

    async def counter(self) -> int:
        """The change counter (moves with every registry change)."""
        async with self.db.engine.connect() as conn:
            value = (
                await conn.execute(
                    select(shared_versions.c.version).where(shared_versions.c.kind == "registry")
                )
            ).scalar_one_or_none()
        return int(value or 0)

    async def serving_view(self) -> ServingView:
        """Stages of every model and deployments of every ready version, read together."""
        async with self.db.engine.begin() as conn:
            counter = (
                await conn.execute(
                    select(shared_versions.c.version).where(shared_versions.c.kind == "registry")
                )
            ).scalar_one_or_none()
            stage_rows = (await conn.execute(select(stages_t))).all()
            version_rows = (
                await conn.execute(
                    select(versions_t.c.model, versions_t.c.version, versions_t.c.deployments)
                    .where(versions_t.c.status == "ready")
                    .order_by(versions_t.c.model, versions_t.c.seq)
                )
            ).all()
        stages: dict[str, dict[str, str | None]] = {}
        for s in stage_rows:
            stages.setdefault(s.model, {})[s.stage] = s.version
        deployments = {(v.model, v.version): list(v.deployments) for v in version_rows}
        return ServingView(int(counter or 0), stages, deployments)

    # -- helpers -----------------------------------------------------------------------------

    async def _bump(self, conn: AsyncConnection) -> None:
        await bump_counter(conn)

    async def _require_model(self, conn: AsyncConnection, name: str) -> Any:
        row = (await conn.execute(select(models_t).where(models_t.c.name == name))).first()
        if row is None:
            raise NotFound(f"The registry has no model '{name}'.", param="model")
        return row

    async def _stages(self, conn: AsyncConnection, model: str) -> dict[str, str | None]:
        rows = (
            await conn.execute(
                select(stages_t.c.stage, stages_t.c.version)
                .where(stages_t.c.model == model)
                .order_by(stages_t.c.stage)
            )
        ).all()
        return {r.stage: r.version for r in rows}

    async def _find_version(
        self, model: str, version: str, conn: AsyncConnection | None = None
    ) -> Any:
        stmt = select(versions_t).where(
            versions_t.c.model == model, versions_t.c.version == version
        )
        if conn is not None:
            return (await conn.execute(stmt)).first()
        async with self.db.engine.connect() as own:
            return (await own.execute(stmt)).first()
