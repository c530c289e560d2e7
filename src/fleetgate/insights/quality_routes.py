"""Quality routes: events and groundedness samples posted by clients, the quality report and
the human review queue.

Clients (any key; the answer must be one of its team's)::

    POST /v1/insights/events     {"response_id": "chatcmpl-...", "event": "up"}
         # up | down (feedback), accepted | edited | rejected (adoption of a code answer)
    POST /v1/insights/grounding  {"response_id": "...", "answer": "...", "documents": ["..."]}

Admins (master key: every team; a team admin: its own)::

    GET  /admin/insights/quality?start=2026-11-01&end=2026-11-30[&team=ID]
    GET  /admin/insights/reviews[?scored=false][&alias=chat][&limit=50]
    POST /admin/insights/reviews/{request_id}  {"scores": {"correct": 4, "helpful": 5, "safe": 5}}
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from sqlalchemy import select, update

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, NotFound, PermissionDenied
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.insights.business import day_of
from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.grounding import GroundednessScorer
from fleetgate.insights.quality import EVENTS, answer_of, quality_report, record_event
from fleetgate.insights.tables import grounding, reviews
from fleetgate.insights.usage import DAY_MS, sampled
from fleetgate.insights.writer import InsightsWriter
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["QualityRoutes"]

_MAX_DOC_CHARS = 200_000


def _text(body: dict[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidRequest(f"'{name}' must be a non-empty string of at most {limit} characters.",
                             param=name)  # fmt: skip
    return value


def _team(actor: Principal, asked: str | None) -> str | None:
    if actor.is_master:
        return asked or None
    if asked and asked != actor.team_id:
        raise PermissionDenied("A team admin key reads only its own team's insights.")
    return actor.team_id


def _day_ms(value: str | None, name: str, default_ms: int) -> int:
    if value is None:
        return default_ms
    try:
        return day_of(dt.date.fromisoformat(value)) * DAY_MS
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a date YYYY-MM-DD.", param=name) from None


class QualityRoutes:
    def __init__(
        self,
        writer: InsightsWriter,
        access: AdminAccess,
        config: Callable[[], InsightsConfig],
        scorer: Callable[[], GroundednessScorer],
    ) -> None:
        self._writer = writer
        self._db = writer.db
        self._access = access
        self._config = config
        self._scorer = scorer

    def routes(self) -> list[web.RouteDef]:
        wrap = store_unavailable_is_503
        return [
            web.post("/v1/insights/events", wrap(self.post_event)),
            web.post("/v1/insights/grounding", wrap(self.post_grounding)),
            web.get("/admin/insights/quality", wrap(self.quality)),
            web.get("/admin/insights/reviews", wrap(self.list_reviews)),
            web.post("/admin/insights/reviews/{request_id}", wrap(self.score_review)),
        ]

    async def _answer(self, principal: Principal, response_id: str) -> dict[str, Any]:
        team = None if principal.is_master else (principal.team_id or "")
        for attempt in range(2):
            async with self._db.engine.connect() as conn:
                found = await answer_of(conn, response_id, team)
            if found is not None:
                return found
            if attempt == 0:
                await self._writer.flush()  # an answer of the last seconds: write it first
        raise NotFound(f"No answer '{response_id}' of yours is recorded.", param="response_id")

    async def post_event(self, request: web.Request) -> web.Response:
        principal = self._access.authenticated(request)
        body = await read_json(request, 1 << 16)
        response_id = _text(body, "response_id", 200)
        event = body.get("event")
        if event not in EVENTS:
            raise InvalidRequest(f"'event' must be one of {', '.join(EVENTS)}.", param="event")
        answer = await self._answer(principal, response_id)
        async with self._db.engine.begin() as conn:
            await record_event(conn, self._db.dialect, answer, str(event))
        return json_reply({"object": "insights.event", "response_id": response_id,
                           "event": event, "alias": answer["alias"]})  # fmt: skip

    async def post_grounding(self, request: web.Request) -> web.Response:
        principal = self._access.authenticated(request)
        body = await read_json(request, 1 << 21)
        response_id = _text(body, "response_id", 200)
        answer_text = _text(body, "answer", 50_000)
        documents = body.get("documents")
        if (
            not isinstance(documents, list)
            or not 1 <= len(documents) <= 50
            or not all(isinstance(d, str) for d in documents)
            or sum(len(d) for d in documents) > _MAX_DOC_CHARS
        ):
            raise InvalidRequest(
                f"'documents' must be 1-50 strings of {_MAX_DOC_CHARS} characters in all.",
                param="documents",
            )
        answer = await self._answer(principal, response_id)
        config = self._config()
        if not sampled(response_id, config.grounding_share):
            return json_reply({"object": "insights.grounding", "sampled": False})
        score = await asyncio.to_thread(self._scorer().score, answer_text, documents)
        row = {"sample_id": answer["request_id"], "created_ms": int(time.time() * 1000),
               "team_id": answer["team_id"], "alias": answer["alias"],
               "version": answer["version"], "score": score,
               "grounded": int(score >= config.grounding_threshold)}  # fmt: skip
        await self._db.insert_ignore(grounding, [row])
        return json_reply({"object": "insights.grounding", "sampled": True, "score": score,
                           "grounded": bool(row["grounded"])})  # fmt: skip

    async def quality(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        today = int(time.time() * 1000) // DAY_MS * DAY_MS
        end = _day_ms(request.query.get("end"), "end", today) + DAY_MS
        start = _day_ms(request.query.get("start"), "start", end - 30 * DAY_MS)
        if start >= end or end - start > 400 * DAY_MS:
            raise InvalidRequest("'start' must not be after 'end', at most 400 days apart.",
                                 param="start")  # fmt: skip
        team = _team(actor, request.query.get("team"))
        async with self._db.engine.connect() as conn:
            rows = await quality_report(conn, start, end, team, self._config().follow_up_s)
        return json_reply({"object": "list", "team_id": team, "data": rows})

    async def list_reviews(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        team = _team(actor, request.query.get("team"))
        raw = request.query.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 500:
            raise InvalidRequest("'limit' must be a whole number from 1 to 500.", param="limit")
        query = select(reviews).order_by(reviews.c.created_ms).limit(int(raw))
        if team is not None:
            query = query.where(reviews.c.team_id == team)
        if alias := request.query.get("alias"):
            query = query.where(reviews.c.alias == alias)
        scored = request.query.get("scored")
        if scored in ("false", "true"):
            column = reviews.c.score
            query = query.where(column.is_(None) if scored == "false" else column.is_not(None))
        async with self._db.engine.connect() as conn:
            # str(): column names are a str subclass, which orjson refuses as a key
            rows = [
                {str(k): v for k, v in r._mapping.items()}
                for r in (await conn.execute(query)).all()
            ]
        return json_reply({"object": "list", "rubric": list(self._config().review_rubric),
                           "data": rows})  # fmt: skip

    def _scores(self, body: dict[str, Any]) -> dict[str, int]:
        rubric = self._config().review_rubric
        scores = body.get("scores")
        if (
            not isinstance(scores, dict)
            or set(scores) != set(rubric)
            or not all(type(v) is int and 1 <= v <= 5 for v in scores.values())
        ):
            raise InvalidRequest(
                f"'scores' must give each of {', '.join(rubric)} a whole number from 1 to 5.",
                param="scores",
            )
        return {str(k): int(v) for k, v in scores.items()}

    async def score_review(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        scores = self._scores(await read_json(request, 1 << 16))
        request_id = request.match_info["request_id"]
        where = [reviews.c.request_id == request_id]
        if not actor.is_master:
            where.append(reviews.c.team_id == (actor.team_id or ""))
        mean = sum(scores.values()) / len(scores)
        async with self._db.engine.begin() as conn:
            done = await conn.execute(
                update(reviews).where(*where).values(
                    scores=scores, score=mean, reviewer=actor.key_id[:40],
                    scored_ms=int(time.time() * 1000),
                )
            )  # fmt: skip
        if done.rowcount == 0:
            raise NotFound(f"No review item '{request_id}'.", param="request_id")
        await self._access.record(actor, "insights.review", request_id, scores)
        return json_reply({"object": "insights.review", "request_id": request_id,
                           "scores": scores, "score": mean})  # fmt: skip
