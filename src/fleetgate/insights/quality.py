"""Answer quality per alias and version: abandonment, regeneration, explicit feedback,
adoption, groundedness (a hallucination-rate estimate) and human review scores.

- **Abandoned**: a streamed request the client cut (status 499) with no follow-up: no later
  request in the same session or conversation (``x-session-id`` / ``x-conversation-id``) within
  ``follow_up_s`` of its arrival. A request without either id has no follow-up to see: a cut
  one counts.
  The follow-up is looked for past the report's end too (up to ``follow_up_s``).
- **Regeneration**: a request whose last user message is the same as the previous request's in
  the same conversation (else session) on the same UTC day: the user asked again for the same
  thing. (Per day, so that a finished day's figures never change: `insights.quality_cache`.)
- **Feedback** (up/down) and **adoption** (accepted/edited/rejected): events posted by
  ``response_id`` (`record_event`), one of each per answer, the last one wins; counted with
  the answer's time.
- **Hallucination rate**: 1 - the share of sampled RAG answers scored grounded
  (`insights.grounding`). **Review score**: the mean rubric score of reviewed samples.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.insights.marks import HOUR, bump
from fleetgate.insights.tables import events, requests

__all__ = [
    "EVENTS",
    "Key",
    "answer_of",
    "combine",
    "path_counts",
    "quality_report",
    "record_event",
    "side_counts",
]

EVENTS = {"up": "feedback", "down": "feedback", "accepted": "adoption", "edited": "adoption",
          "rejected": "adoption"}  # fmt: skip


async def answer_of(
    conn: AsyncConnection, response_id: str, team_id: str | None
) -> dict[str, Any] | None:
    """The request that produced ``response_id`` (within ``team_id``; None: any team): its id,
    team, alias, version and ``created_ms``."""
    query = select(requests.c.request_id, requests.c.team_id, requests.c.alias,
                   requests.c.version, requests.c.created_ms,
                   ).where(requests.c.response_id == response_id)  # fmt: skip
    if team_id is not None:
        query = query.where(requests.c.team_id == team_id)
    row = (await conn.execute(query.limit(1))).first()
    return None if row is None else row._asdict()


async def record_event(
    conn: AsyncConnection, dialect: str, answer: dict[str, Any], value: str
) -> None:
    """Store ``value`` (a key of `EVENTS`) for ``answer`` (`answer_of`), replacing its
    category's last one; the answer's hour is counted as written (`insights.marks`)."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    answer = dict(answer)
    answer_ms = answer.pop("created_ms")
    row = {**answer, "category": EVENTS[value], "value": value,
           "created_ms": int(time.time() * 1000)}  # fmt: skip
    stmt = insert(events).values(row)
    await conn.execute(stmt.on_conflict_do_update(
        index_elements=[events.c.request_id, events.c.category],
        set_={"value": stmt.excluded.value, "created_ms": stmt.excluded.created_ms},
    ))  # fmt: skip
    await bump(conn, dialect, HOUR, {answer_ms // 3_600_000})


Key = tuple[int, str, str, str]  # (day, team, alias, version ('' for none))

PATHS = ("requests", "streamed", "abandoned", "regenerated")
SIDES = ("feedback_up", "feedback_down", "accepted", "edited", "rejected", "grounding_samples",
         "grounded", "reviews_scored", "review_score_sum")  # fmt: skip

# Per request: its thread (conversation, else session), the previous request's prompt hash in
# that thread on the same UTC day, and the next request's time in that thread (read up to the
# follow-up window past the range, so a cut stream at its end sees its follow-up).
_PATHS_SQL = """
SELECT day, team_id, alias, COALESCE(version, ''), COUNT(*), SUM(stream),
  SUM(CASE WHEN stream = 1 AND status = 499 AND (thread IS NULL OR next_ms IS NULL
      OR next_ms - created_ms > :gap) THEN 1 ELSE 0 END),
  SUM(CASE WHEN thread IS NOT NULL AND prompt_hash IS NOT NULL AND prompt_hash = prev_hash
      THEN 1 ELSE 0 END)
FROM (
  SELECT day, team_id, alias, version, stream, status, created_ms, prompt_hash, thread,
    LAG(prompt_hash) OVER (PARTITION BY team_id, thread, day
                           ORDER BY created_ms, request_id) AS prev_hash,
    LEAD(created_ms) OVER (PARTITION BY team_id, thread ORDER BY created_ms, request_id) AS next_ms
  FROM (SELECT day, team_id, alias, version, stream, status, created_ms, prompt_hash,
               request_id, COALESCE(conversation_id, session_id) AS thread
        FROM fg_insight_requests
        WHERE created_ms >= :a AND created_ms < :ahead{team}) s
) w
WHERE created_ms < :b
GROUP BY day, team_id, alias, COALESCE(version, '')
"""

_EVENTS_SQL = """
SELECT r.day, e.team_id, e.alias, COALESCE(e.version, ''), e.value, COUNT(*)
FROM fg_insight_events e JOIN fg_insight_requests r ON r.request_id = e.request_id
WHERE r.created_ms >= :a AND r.created_ms < :b{team}
GROUP BY r.day, e.team_id, e.alias, COALESCE(e.version, ''), e.value
"""

_GROUNDING_SQL = """
SELECT created_ms / 86400000, team_id, alias, COALESCE(version, ''), COUNT(*), SUM(grounded)
FROM fg_insight_grounding WHERE created_ms >= :a AND created_ms < :b{team}
GROUP BY created_ms / 86400000, team_id, alias, COALESCE(version, '')
"""

_REVIEWS_SQL = """
SELECT created_ms / 86400000, team_id, alias, COALESCE(version, ''), COUNT(*), SUM(score)
FROM fg_insight_reviews WHERE created_ms >= :a AND created_ms < :b AND score IS NOT NULL{team}
GROUP BY created_ms / 86400000, team_id, alias, COALESCE(version, '')
"""


def _sql(template: str, team_id: str | None) -> Any:
    return text(template.format(team=" AND team_id = :team" if team_id is not None else ""))


async def path_counts(
    conn: AsyncConnection, start_ms: int, end_ms: int, team_id: str | None, follow_up_s: float
) -> dict[Key, list[int]]:
    """Requests, streamed, abandoned and regenerated per day, team, alias and version of the
    requests in ``[start_ms, end_ms)``: one grouped query (the rows never leave the store)."""
    gap = int(follow_up_s * 1000)
    rows = await conn.execute(
        _sql(_PATHS_SQL, team_id),
        {"a": start_ms, "b": end_ms, "ahead": end_ms + gap, "gap": gap, "team": team_id},
    )
    return {(int(d), t, a, v): [int(n), int(s or 0), int(ab or 0), int(rg or 0)]
            for d, t, a, v, n, s, ab, rg in rows}  # fmt: skip


async def side_counts(
    conn: AsyncConnection, start_ms: int, end_ms: int, team_id: str | None
) -> dict[Key, dict[str, float]]:
    """Feedback and adoption events (by the answer's day), groundedness samples and scored
    reviews per day, team, alias and version in ``[start_ms, end_ms)``."""
    out: dict[Key, dict[str, float]] = {}
    params = {"a": start_ms, "b": end_ms, "team": team_id}
    events_sql = text(
        _EVENTS_SQL.format(team=" AND e.team_id = :team" if team_id is not None else "")
    )
    for d, t, a, v, value, n in await conn.execute(events_sql, params):
        name = {"up": "feedback_up", "down": "feedback_down"}.get(value, value)
        out.setdefault((int(d), t, a, v), {})[name] = int(n)
    for d, t, a, v, n, grounded in await conn.execute(_sql(_GROUNDING_SQL, team_id), params):
        side = out.setdefault((int(d), t, a, v), {})
        side["grounding_samples"], side["grounded"] = int(n), int(grounded or 0)
    for d, t, a, v, n, total in await conn.execute(_sql(_REVIEWS_SQL, team_id), params):
        side = out.setdefault((int(d), t, a, v), {})
        side["reviews_scored"], side["review_score_sum"] = int(n), float(total or 0.0)
    return out


def combine(
    paths: Iterable[tuple[Key, list[int]]], sides: Iterable[tuple[Key, dict[str, float]]]
) -> list[dict[str, Any]]:
    """Per alias and version (summed over days and teams), every figure with its rates."""
    out: dict[tuple[str, str], dict[str, Any]] = {}

    def bucket(key: Key) -> dict[str, Any]:
        _, _, alias, version = key
        if (alias, version) not in out:
            out[(alias, version)] = {
                "alias": alias,
                "version": version or None,
                **dict.fromkeys(PATHS, 0),
                **dict.fromkeys(SIDES, 0),
            }
        return out[(alias, version)]  # fmt: skip

    for key, counts in paths:
        b = bucket(key)
        for name, n in zip(PATHS, counts, strict=True):
            b[name] += n
    for key, side in sides:
        b = bucket(key)
        for name, value in side.items():
            b[name] += value
    return [_rates(out[k]) for k in sorted(out)]


async def quality_report(
    conn: AsyncConnection, start_ms: int, end_ms: int, team_id: str | None, follow_up_s: float
) -> list[dict[str, Any]]:
    """Per alias and version, the figures of the module docstring for ``[start_ms, end_ms)``,
    read from the store now (`insights.quality_cache` keeps finished days)."""
    paths = await path_counts(conn, start_ms, end_ms, team_id, follow_up_s)
    sides = await side_counts(conn, start_ms, end_ms, team_id)
    return combine(paths.items(), sides.items())


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
