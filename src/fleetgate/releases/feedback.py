"""Users' feedback on answers, tied to the request's alias, version and team.

``POST /v1/feedback`` stores one verdict per (request, key): a thumbs up or down, or a score
from 0 to 1, with an optional comment and tags; a later verdict by the same key replaces it.
The request is named by its ``request_id`` (the ``x-request-id`` header of the answer) or by
the ``response_id`` (the ``id`` of the answer's body) of a request on an alias that follows
the registry, which the gateway recorded with its request id, alias, version and team
(`fleetgate.releases.outcomes`). Feedback is taken only on an answer the store holds (its row
in ``fg_release_requests``, else its spend record, written by whichever replica served it
within a second or two) that was served to the caller (`FeedbackStore.served`); on any other
id, issued to another tenant, not issued, or not recorded yet, the answer is the same 404.
The request's alias, version and team are joined from that record when quality is read.

Quality by alias and version also counts **regenerations**: a request whose exact prompt the
same key sent again within the regeneration window (the user asked for another answer), an
implicit negative verdict on the first answer.

Example::

    store = FeedbackStore(db)
    await store.record(principal, FeedbackSpec(request_id=rid, rating="down"))  # served to it
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

from fleetgate.contract.principal import Principal
from fleetgate.errors import NotFound
from fleetgate.releases.tables import feedback, release_requests
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import api_keys, spend

__all__ = ["FeedbackSpec", "FeedbackStore"]

NEGATIVE_BELOW = 0.5  # a score under this (a thumbs down is 0) is negative feedback
_MAX_NAMED = 20  # request rows read for one response id (upstream ids need not be unique)


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

    async def served(self, who: Principal, spec: FeedbackSpec) -> dict[str, Any]:
        """The answer ``spec`` names, as the store holds it (request id, response id, alias,
        version, team), when it was served to ``who``: found through the store, so on any
        replica. `NotFound`, the same for each, when no such answer was served, when it is not
        recorded yet (records are written within a second or two), and when it was served to
        someone else: an id of another tenant tells nothing about it.

        Whose answers a caller may rate: the master key any; a team admin its team's; any
        other key those served to itself or to another key bound to the same user.
        """
        param = "response_id" if spec.response_id is not None else "request_id"
        value = spec.response_id if spec.response_id is not None else spec.request_id
        assert value is not None
        rows = [] if "\x00" in value else await self._recorded(param, value)
        for row in rows:
            if await self._may_rate(who, row):
                return {k: row[k] for k in ("request_id", "response_id", "alias", "version",
                                            "team_id")}  # fmt: skip
        raise NotFound(
            f"No answer with {param} '{value}' was served to this key, or it is not recorded "
            "yet (the gateway records each answer within a second or two: retry then).",
            param=param,
        )

    async def _recorded(self, param: str, value: str) -> list[dict[str, Any]]:
        """The store's records of the answers named ``value`` (newest first): the request
        rows of aliases that follow the registry, else (a request id) the spend row."""
        r, s = release_requests, spend
        key = r.c.response_id if param == "response_id" else r.c.request_id
        by_release = (
            select(r.c.request_id, r.c.response_id, r.c.alias, r.c.version, r.c.team_id,
                   r.c.key_id)
            .where(key == value).order_by(r.c.created_ms.desc()).limit(_MAX_NAMED)
        )  # fmt: skip
        by_spend = select(
            s.c.request_id, literal(None).label("response_id"), s.c.alias, s.c.version,
            s.c.team_id, s.c.key_id,
        ).where(s.c.request_id == value)  # fmt: skip
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(by_release)).all()
            if not rows and param == "request_id":
                rows = (await conn.execute(by_spend)).all()
        return [dict(row._mapping) for row in rows]

    async def _may_rate(self, who: Principal, row: dict[str, Any]) -> bool:
        if who.is_master:
            return True
        if row["team_id"] is None or row["team_id"] != who.team_id:
            return False
        if who.role == "team_admin" or row["key_id"] == who.key_id:
            return True
        if not who.user_id or who.owner != f"user:{who.user_id}" or not row["key_id"]:
            return False  # only keys bound to a user of the team share that user's answers
        query = select(api_keys.c.user_id).where(
            api_keys.c.id == row["key_id"], api_keys.c.team_id == who.team_id
        )
        async with self.db.engine.connect() as conn:
            return bool(await conn.scalar(query) == who.user_id)

    async def record(self, who: Principal, spec: FeedbackSpec) -> dict[str, Any]:
        """Store ``who``'s verdict on an answer served to it (see `served`; `NotFound` for
        any other); returns what was stored and what the answer was."""
        served = await self.served(who, spec)
        row = {
            "request_id": served["request_id"], "key_id": who.key_id, "team_id": who.team_id,
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
        return {
            "object": "feedback", **row, "response_id": served["response_id"],
            "request": {k: served[k] for k in ("alias", "version", "team_id")},
        }  # fmt: skip

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
