"""Users' feedback on answers, tied to the request's alias, version and team.

``POST /v1/feedback`` stores one verdict per (request, key): a thumbs up or down, or a score
from 0 to 1, with an optional comment and tags; a later verdict by the same key replaces it.
The request is named by its ``request_id`` (the ``x-request-id`` header of the answer) or by
the ``response_id`` (the ``id`` of the answer's body) of a request on an alias that follows
the registry, which the gateway recorded with its request id, alias, version and team
(`fleetgate.releases.outcomes`). The request's alias, version and team are not copied into the
feedback: they are joined from what the gateway recorded of that request (its row in
``fg_release_requests``, else its spend record) when quality is read, so feedback sent before
the request's record was written (records are batched) still counts once it is, and feedback
on a request of another team never does.

Quality by alias and version also counts **regenerations**: a request whose exact prompt the
same key sent again within the regeneration window (the user asked for another answer), an
implicit negative verdict on the first answer.

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
from sqlalchemy import and_, case, exists, func, literal, or_, select, union_all
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import aliased
from sqlalchemy.sql.expression import Exists

from fleetgate.errors import NotFound
from fleetgate.releases.tables import release_requests
from fleetgate.store.database import Database
from fleetgate.store.tables import feedback, spend
from fleetgate.tenancy.principal import Principal

__all__ = ["FeedbackSpec", "FeedbackStore"]

NEGATIVE_BELOW = 0.5  # a score under this (a thumbs down is 0) is negative feedback


class FeedbackSpec(BaseModel):
    """The body of ``POST /v1/feedback``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str | None = Field(None, min_length=1, max_length=100)
    response_id: str | None = Field(None, min_length=1, max_length=200)
    rating: Literal["up", "down"] | None = None
    score: float | None = Field(None, ge=0, le=1)
    comment: str | None = Field(None, max_length=4000)
    tags: list[str] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _one_verdict(self) -> FeedbackSpec:
        if (self.request_id is None) == (self.response_id is None):
            raise ValueError("give exactly one of 'request_id' and 'response_id'")
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

    async def resolve(self, spec: FeedbackSpec) -> dict[str, Any] | None:
        """What the gateway recorded of the request ``spec`` names (request id, alias, version,
        team), or None when it recorded nothing (yet); `NotFound` for an unknown
        ``response_id``."""
        r = release_requests
        stmt = select(r.c.request_id, r.c.response_id, r.c.alias, r.c.version, r.c.team_id)
        if spec.response_id is not None:
            stmt = stmt.where(r.c.response_id == spec.response_id)
        else:
            stmt = stmt.where(r.c.request_id == spec.request_id)
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(stmt.order_by(r.c.created_ms.desc()).limit(1))).first()
        if row is None and spec.response_id is not None:
            raise NotFound(
                f"No answer with response_id '{spec.response_id}' is known (the gateway "
                "records them for aliases that follow the registry, within a second or two); "
                "send its request_id (the x-request-id header) instead.",
                param="response_id",
            )
        return dict(row._mapping) if row is not None else None

    async def record(self, who: Principal, spec: FeedbackSpec) -> dict[str, Any]:
        served = await self.resolve(spec)
        request_id = served["request_id"] if served is not None else spec.request_id
        row = {
            "request_id": request_id, "key_id": who.key_id, "team_id": who.team_id,
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
        out: dict[str, Any] = {"object": "feedback", **row}
        if served is not None:
            out["response_id"] = served["response_id"]
            out["request"] = {k: served[k] for k in ("alias", "version", "team_id")}
        return out

    async def quality(
        self, *, since_ms: int, alias: str | None = None, regen_window_s: float = 600.0
    ) -> list[dict[str, Any]]:
        """By alias and version since ``since_ms``: requests, feedback, negative feedback,
        negative-feedback rate, mean score and regenerations (the master key's feedback
        counts for any team's request; another key's only for its own team's)."""
        r, s = release_requests, spend
        served_q = union_all(
            select(r.c.request_id, r.c.alias, r.c.version, r.c.team_id, r.c.created_ms,
                   literal(1).label("recorded")),
            select(s.c.request_id, s.c.alias, s.c.version, s.c.team_id, s.c.created_ms,
                   literal(0).label("recorded"))
            .where(~exists().where(r.c.request_id == s.c.request_id)),
        ).subquery("served")  # fmt: skip
        sv = served_q.c
        same_team = or_(feedback.c.team_id.is_(None), feedback.c.team_id == sv.team_id)
        negative = func.sum(case((feedback.c.score < NEGATIVE_BELOW, 1), else_=0))
        rated = (
            select(sv.alias, sv.version, func.count().label("feedback"),
                   negative.label("negative"), func.avg(feedback.c.score).label("mean_score"))
            .select_from(feedback.join(served_q, and_(sv.request_id == feedback.c.request_id,
                                                      same_team)))
            .where(feedback.c.created_ms >= since_ms)
            .group_by(sv.alias, sv.version)
        )  # fmt: skip
        counted = (
            select(sv.alias, sv.version, func.count().label("requests"))
            .where(sv.created_ms >= since_ms)
            .group_by(sv.alias, sv.version)
        )
        regens = (
            select(r.c.alias, r.c.version, func.count().label("regenerations"))
            .where(r.c.created_ms >= since_ms, asked_again(regen_window_s))
            .group_by(r.c.alias, r.c.version)
        )
        if alias is not None:
            rated = rated.where(sv.alias == alias)
            counted = counted.where(sv.alias == alias)
            regens = regens.where(r.c.alias == alias)
        async with self.db.engine.connect() as conn:
            counts = {(x.alias, x.version): x.requests for x in await conn.execute(counted)}
            rows = {(x.alias, x.version): x for x in await conn.execute(rated)}
            regen = {(x.alias, x.version): x.regenerations for x in await conn.execute(regens)}
        out = []
        for key in sorted(rows.keys() | regen.keys(), key=lambda k: (k[0], k[1] or "")):
            x = rows.get(key)
            n = x.feedback if x is not None else 0
            neg = int(x.negative or 0) if x is not None else 0
            again = regen.get(key, 0)
            out.append({
                "alias": key[0], "version": key[1], "requests": counts.get(key, 0),
                "feedback": n, "negative": neg,
                "negative_rate": neg / n if n else None,
                "mean_score": float(x.mean_score) if x is not None else None,
                "regenerations": again,
                # explicit negatives and regenerations over explicit verdicts and regenerations
                "implicit_negative_rate": (neg + again) / (n + again) if n + again else None,
            })  # fmt: skip
        return out


def asked_again(window_s: float) -> Exists:
    """A clause true for a row of `release_requests` whose exact prompt the same key sent again
    within ``window_s``: a regeneration. Two requests in the same millisecond are ordered by
    request id, so one of the pair counts, never neither."""
    r, later = release_requests, aliased(release_requests)
    return exists().where(
        later.c.key_id == r.c.key_id,
        later.c.prompt_hash == r.c.prompt_hash,
        or_(
            later.c.created_ms > r.c.created_ms,
            and_(later.c.created_ms == r.c.created_ms, later.c.request_id > r.c.request_id),
        ),
        later.c.created_ms <= r.c.created_ms + int(window_s * 1000),
    )
