"""Users' feedback on answers, tied to the request's alias, version and team.

``POST /v1/feedback`` stores one verdict per (request id, key): a thumbs up or down, or a
score from 0 to 1, with an optional comment and tags; a later verdict by the same key replaces
it. The request's alias, deployment version and team are not copied: they are joined from the
spend record of that request id when quality is read, so feedback sent before the request's
record was written (records are batched) still counts once it is, and feedback on a request
of another team never does.

Example::

    store = FeedbackStore(db)
    await store.record(principal, FeedbackSpec(request_id="req-1", rating="down"))
    rows = await store.quality(since_ms=0)   # by alias and version: negative-feedback rate
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleetgate.store.database import Database
from fleetgate.store.tables import feedback, spend
from fleetgate.tenancy.principal import Principal

__all__ = ["FeedbackSpec", "FeedbackStore"]

NEGATIVE_BELOW = 0.5  # a score under this (a thumbs down is 0) is negative feedback


class FeedbackSpec(BaseModel):
    """The body of ``POST /v1/feedback``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = Field(min_length=1, max_length=100)
    rating: Literal["up", "down"] | None = None
    score: float | None = Field(None, ge=0, le=1)
    comment: str | None = Field(None, max_length=4000)
    tags: list[str] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _one_verdict(self) -> FeedbackSpec:
        if (self.rating is None) == (self.score is None):
            raise ValueError("give exactly one of 'rating' (up or down) and 'score' (0..1)")
        if any(not t or len(t) > 100 for t in self.tags):
            raise ValueError("tags must be 1 to 100 characters each")
        return self

    @property
    def value(self) -> float:
        if self.score is not None:
            return self.score
        return 1.0 if self.rating == "up" else 0.0


class FeedbackStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self._clock = clock

    async def record(self, who: Principal, spec: FeedbackSpec) -> dict[str, Any]:
        row = {
            "request_id": spec.request_id, "key_id": who.key_id, "team_id": who.team_id,
            "score": spec.value, "rating": spec.rating, "comment": spec.comment,
            "tags": spec.tags, "created_ms": int(self._clock() * 1000),
        }  # fmt: skip
        insert = pg_insert if self.db.dialect == "postgresql" else sqlite_insert
        stmt = insert(feedback).values(**row)
        stmt = stmt.on_conflict_do_update(
            index_elements=[feedback.c.request_id, feedback.c.key_id],
            set_={k: stmt.excluded[k] for k in ("score", "rating", "comment", "tags",
                                                 "created_ms", "team_id")},
        )  # fmt: skip
        async with self.db.engine.begin() as conn:
            await conn.execute(stmt)
        return {"object": "feedback", **row}

    async def quality(self, *, since_ms: int, alias: str | None = None) -> list[dict[str, Any]]:
        """By alias and version since ``since_ms``: requests, feedback, negative feedback,
        negative-feedback rate and mean score (the master key's feedback counts for any
        team's request; another key's only for its own team's)."""
        same_team = or_(feedback.c.team_id.is_(None), feedback.c.team_id == spend.c.team_id)
        negative = func.sum(case((feedback.c.score < NEGATIVE_BELOW, 1), else_=0))
        rated = (
            select(spend.c.alias, spend.c.version, func.count().label("feedback"),
                   negative.label("negative"), func.avg(feedback.c.score).label("mean_score"))
            .select_from(feedback.join(spend, and_(spend.c.request_id == feedback.c.request_id,
                                                   same_team)))
            .where(feedback.c.created_ms >= since_ms)
            .group_by(spend.c.alias, spend.c.version)
        )  # fmt: skip
        served = (
            select(spend.c.alias, spend.c.version, func.count().label("requests"))
            .where(spend.c.created_ms >= since_ms)
            .group_by(spend.c.alias, spend.c.version)
        )
        if alias is not None:
            rated = rated.where(spend.c.alias == alias)
            served = served.where(spend.c.alias == alias)
        async with self.db.engine.connect() as conn:
            counts = {(r.alias, r.version): r.requests for r in await conn.execute(served)}
            rows = (await conn.execute(rated)).all()
        out = []
        for r in rows:
            out.append({
                "alias": r.alias, "version": r.version,
                "requests": counts.get((r.alias, r.version), 0), "feedback": r.feedback,
                "negative": int(r.negative or 0),
                "negative_rate": int(r.negative or 0) / r.feedback,
                "mean_score": float(r.mean_score),
            })  # fmt: skip
        return sorted(out, key=lambda x: (x["alias"], x["version"] or ""))
