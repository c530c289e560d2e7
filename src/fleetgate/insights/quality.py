"""Answer quality per alias and version: abandonment, regeneration, explicit feedback,
adoption, groundedness (a hallucination-rate estimate) and human review scores.

- **Abandoned**: a streamed request the client cut (status 499) with no follow-up: no later
  request in the same session or conversation (``x-session-id`` / ``x-conversation-id``) within
  ``follow_up_s``. A request without either id has no follow-up to see: a cut one counts.
- **Regeneration**: a request whose last user message is the same as the previous request's in
  the same conversation (else session): the user asked again for the same thing.
- **Feedback** (up/down) and **adoption** (accepted/edited/rejected): events posted by
  ``response_id`` (`record_event`), one of each per answer, the last one wins.
- **Hallucination rate**: 1 - the share of sampled RAG answers scored grounded
  (`insights.grounding`). **Review score**: the mean rubric score of reviewed samples.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.insights.tables import events, grounding, requests, reviews

__all__ = ["EVENTS", "answer_of", "quality_report", "record_event"]

EVENTS = {"up": "feedback", "down": "feedback", "accepted": "adoption", "edited": "adoption",
          "rejected": "adoption"}  # fmt: skip
MAX_ROWS = 2_000_000  # requests read for one report (a longer range: narrow it)


async def answer_of(
    conn: AsyncConnection, response_id: str, team_id: str | None
) -> dict[str, Any] | None:
    """The request that produced ``response_id`` (within ``team_id``; None: any team)."""
    query = select(requests.c.request_id, requests.c.team_id, requests.c.alias,
                   requests.c.version).where(requests.c.response_id == response_id)  # fmt: skip
    if team_id is not None:
        query = query.where(requests.c.team_id == team_id)
    row = (await conn.execute(query.limit(1))).first()
    return None if row is None else dict(row._mapping)


async def record_event(
    conn: AsyncConnection, dialect: str, answer: dict[str, Any], value: str
) -> None:
    """Store ``value`` (a key of `EVENTS`) for ``answer``, replacing its category's last one."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    row = {**answer, "category": EVENTS[value], "value": value,
           "created_ms": int(time.time() * 1000)}  # fmt: skip
    stmt = insert(events).values(row)
    await conn.execute(stmt.on_conflict_do_update(
        index_elements=[events.c.request_id, events.c.category],
        set_={"value": stmt.excluded.value, "created_ms": stmt.excluded.created_ms},
    ))  # fmt: skip


def _bucket(out: dict[tuple[str, str], dict[str, Any]], alias: str, version: Any) -> dict[str, Any]:
    key = (alias, version or "")
    if key not in out:
        out[key] = {
            "alias": alias, "version": version or None, "requests": 0, "streamed": 0,
            "abandoned": 0, "regenerated": 0, "feedback_up": 0, "feedback_down": 0,
            "accepted": 0, "edited": 0, "rejected": 0, "grounding_samples": 0,
            "grounded": 0, "reviews_scored": 0, "review_score_sum": 0.0,
        }  # fmt: skip
    return out[key]


def _paths(rows: Iterable[Any], out: dict[tuple[str, str], dict[str, Any]], gap_ms: int) -> None:
    """Abandonment and regeneration from the requests in time order."""
    last: dict[tuple[str, str], Any] = {}  # thread -> its latest request
    cut: dict[tuple[str, str], Any] = {}  # thread -> a cut stream waiting for a follow-up
    for r in rows:
        b = _bucket(out, r.alias, r.version)
        b["requests"] += 1
        b["streamed"] += r.stream
        thread_id = r.conversation_id or r.session_id
        thread = (r.team_id, thread_id) if thread_id else None
        if thread is not None:
            waiting = cut.pop(thread, None)
            if waiting is not None and r.created_ms - waiting.created_ms > gap_ms:
                _bucket(out, waiting.alias, waiting.version)["abandoned"] += 1
            before = last.get(thread)
            if before is not None and r.prompt_hash and r.prompt_hash == before.prompt_hash:
                b["regenerated"] += 1
            last[thread] = r
        if r.stream and r.status == 499:
            if thread is None:
                b["abandoned"] += 1
            else:
                cut[thread] = r
    for waiting in cut.values():  # no follow-up by the report's end
        _bucket(out, waiting.alias, waiting.version)["abandoned"] += 1


async def quality_report(
    conn: AsyncConnection, start_ms: int, end_ms: int, team_id: str | None, follow_up_s: float
) -> list[dict[str, Any]]:
    """Per alias and version, the figures of the module docstring for ``[start_ms, end_ms)``."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    r = requests.c
    where = [r.created_ms >= start_ms, r.created_ms < end_ms]
    if team_id is not None:
        where.append(r.team_id == team_id)
    cols = (r.created_ms, r.team_id, r.alias, r.version, r.status, r.stream, r.session_id,
            r.conversation_id, r.prompt_hash)  # fmt: skip
    rows = await conn.stream(
        select(*cols).where(and_(*where)).order_by(r.created_ms, r.request_id).limit(MAX_ROWS)
    )
    _paths([row async for row in rows], out, int(follow_up_s * 1000))
    team = [] if team_id is None else [events.c.team_id == team_id]
    e = events.c
    for alias, version, value, n in await conn.execute(
        select(e.alias, e.version, e.value, func.count())
        .where(e.created_ms >= start_ms, e.created_ms < end_ms, *team)
        .group_by(e.alias, e.version, e.value)
    ):
        name = {"up": "feedback_up", "down": "feedback_down"}.get(value, value)
        _bucket(out, alias, version)[name] += int(n)
    g = grounding.c
    for alias, version, n, grounded in await conn.execute(
        select(g.alias, g.version, func.count(), func.sum(g.grounded))
        .where(g.created_ms >= start_ms, g.created_ms < end_ms,
               *([g.team_id == team_id] if team_id else []))
        .group_by(g.alias, g.version)
    ):  # fmt: skip
        b = _bucket(out, alias, version)
        b["grounding_samples"], b["grounded"] = int(n), int(grounded or 0)
    v = reviews.c
    for alias, version, n, total in await conn.execute(
        select(v.alias, v.version, func.count(), func.sum(v.score))
        .where(v.created_ms >= start_ms, v.created_ms < end_ms, v.score.is_not(None),
               *([v.team_id == team_id] if team_id else []))
        .group_by(v.alias, v.version)
    ):  # fmt: skip
        b = _bucket(out, alias, version)
        b["reviews_scored"], b["review_score_sum"] = int(n), float(total or 0.0)
    return [_rates(out[k]) for k in sorted(out)]


def _share(n: int, d: int) -> float | None:
    return n / d if d else None


def _rates(b: dict[str, Any]) -> dict[str, Any]:
    adoption = b["accepted"] + b["edited"] + b["rejected"]
    feedback = b["feedback_up"] + b["feedback_down"]
    scored = b.pop("review_score_sum")
    return {
        **b,
        "abandonment_rate": _share(b["abandoned"], b["streamed"]),
        "regeneration_rate": _share(b["regenerated"], b["requests"]),
        "feedback_positive_rate": _share(b["feedback_up"], feedback),
        "adoption_rate": _share(b["accepted"] + b["edited"], adoption),
        "hallucination_rate": None
        if not b["grounding_samples"]
        else 1 - b["grounded"] / b["grounding_samples"],
        "review_score": scored / b["reviews_scored"] if b["reviews_scored"] else None,
    }
