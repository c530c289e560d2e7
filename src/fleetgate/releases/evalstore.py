"""`EvalStore`: evaluation runs and their per-item results, attached to a registry version.

The runner (`fleetgate.releases.runner`) posts a run after judging a version through the
gateway; gates read the metrics back: the candidate's latest run of each suite, and a
baseline's latest run *of the same suite* (same digest of the items), so what is compared was
measured on the same items.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import insert, select

from fleetgate.errors import NotFound
from fleetgate.releases.tables import eval_items, eval_runs
from fleetgate.store.database import Database

__all__ = ["EvalStore", "ItemResult", "RunRecord"]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ItemResult(_Input):
    item_id: str = Field(min_length=1, max_length=200)
    kind: str = Field(min_length=1, max_length=32)
    score: float = Field(ge=0, le=1)
    passed: bool
    output: str | None = Field(None, max_length=100_000)
    ttft_ms: float | None = Field(None, ge=0)
    error: str | None = Field(None, max_length=2000)


class RunRecord(_Input):
    """``POST /admin/registry/models/{model}/versions/{version}/evals``."""

    suite: str = Field(min_length=1, max_length=200)
    suite_digest: str = Field(pattern=r"^[0-9a-f]{16,64}$")
    metrics: dict[str, float]
    comparison: dict[str, Any] | None = None
    items: list[ItemResult] = Field(default_factory=list, max_length=100_000)


def _run_dict(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "model": row.model,
        "version": row.version,
        "suite": row.suite,
        "suite_digest": row.suite_digest,
        "metrics": row.metrics,
        "comparison": row.comparison,
        "created_ms": row.created_ms,
    }


class EvalStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self._clock = clock

    async def add_run(self, model: str, version: str, run: RunRecord) -> dict[str, Any]:
        run_id = "run-" + uuid.uuid4().hex[:20]
        row = {
            "id": run_id, "model": model, "version": version, "suite": run.suite,
            "suite_digest": run.suite_digest, "metrics": run.metrics,
            "comparison": run.comparison, "created_ms": int(self._clock() * 1000),
        }  # fmt: skip
        async with self.db.engine.begin() as conn:
            await conn.execute(insert(eval_runs).values(**row))
            if run.items:
                await conn.execute(
                    insert(eval_items), [{"run_id": run_id, **i.model_dump()} for i in run.items]
                )
        return {**row, "items": len(run.items)}

    async def runs(self, model: str, version: str) -> list[dict[str, Any]]:
        """The version's runs, newest first (without items)."""
        async with self.db.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(eval_runs)
                    .where(eval_runs.c.model == model, eval_runs.c.version == version)
                    .order_by(eval_runs.c.created_ms.desc(), eval_runs.c.id)
                )
            ).all()
        return [_run_dict(r) for r in rows]

    async def run(self, run_id: str) -> dict[str, Any]:
        """One run with its items."""
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(select(eval_runs).where(eval_runs.c.id == run_id))).first()
            if row is None:
                raise NotFound(f"No evaluation run '{run_id}'.", param="run")
            items = (
                await conn.execute(
                    select(eval_items)
                    .where(eval_items.c.run_id == run_id)
                    .order_by(eval_items.c.item_id)
                )
            ).all()
        return {
            **_run_dict(row),
            "items": [{str(k): v for k, v in i._asdict().items()} for i in items],
        }

    async def latest(self, model: str, version: str) -> dict[str, dict[str, Any]]:
        """The version's newest run of each suite, by suite digest."""
        latest: dict[str, dict[str, Any]] = {}
        for run in await self.runs(model, version):
            latest.setdefault(run["suite_digest"], run)
        return latest

    async def gate_metrics(
        self, model: str, candidate: str, baselines: dict[str, str | None]
    ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """(candidate metrics, baseline metrics by kind): newest run per suite, merged; a
        baseline only from runs of the suites the candidate ran."""
        mine = await self.latest(model, candidate)
        metrics: dict[str, float] = {}
        for run in mine.values():
            metrics.update(run["metrics"])
        by_kind: dict[str, dict[str, float]] = {}
        for kind, version in baselines.items():
            if version is None or version == candidate:
                continue
            theirs = await self.latest(model, version)
            merged: dict[str, float] = {}
            for digest in mine:
                if digest in theirs:
                    merged.update(theirs[digest]["metrics"])
            if merged:
                by_kind[kind] = merged
        return metrics, by_kind
