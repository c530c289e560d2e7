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
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, NotFound
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.grounding import GroundednessScorer
from fleetgate.insights.marks import HOUR, bump
from fleetgate.insights.quality import EVENTS, answer_of, record_event
from fleetgate.insights.query import query_day, team_scope
from fleetgate.insights.reports import InsightsReports, ReviewFilter
from fleetgate.insights.tables import grounding
from fleetgate.insights.usage import sampled
from fleetgate.insights.writer import InsightsWriter
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.telemetry.registry import Counter
from fleetgate.timespans import DAY_MS

__all__ = ["QualityRoutes"]

_MAX_DOC_CHARS = 200_000


def _text(body: dict[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidRequest(f"'{name}' must be a non-empty string of at most {limit} characters.",
                             param=name)  # fmt: skip
    return value


class QualityRoutes:
    def __init__(
        self,
        writer: InsightsWriter,
        access: AdminAccess,
        config: Callable[[], InsightsConfig],
        scorer: Callable[[], GroundednessScorer],
        reports: InsightsReports,
        events: Counter | None = None,
    ) -> None:
        self._reports = reports
        self._events = events
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
        self._reports.cache.invalidate()
        if self._events is not None:
            self._events.labels(answer["alias"], str(event)).inc()
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
        async with self._db.engine.begin() as conn:
            await self._db.insert_new(grounding, [row], conn)
            await bump(conn, self._db.dialect, HOUR, {row["created_ms"] // 3_600_000})
        self._reports.cache.invalidate()
        return json_reply({"object": "insights.grounding", "sampled": True, "score": score,
                           "grounded": bool(row["grounded"])})  # fmt: skip

    async def quality(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        today = int(time.time() * 1000) // DAY_MS
        end = (query_day(request.query.get("end"), "end", today) + 1) * DAY_MS
        start = query_day(request.query.get("start"), "start", end // DAY_MS - 30) * DAY_MS
        if start >= end or end - start > 400 * DAY_MS:
            raise InvalidRequest("'start' must not be after 'end', at most 400 days apart.",
                                 param="start")  # fmt: skip
        team = team_scope(actor, request.query.get("team"))
        rows = await self._reports.quality(start, end, team)
        return json_reply({"object": "list", "team_id": team, "data": rows})

    async def list_reviews(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        team = team_scope(actor, request.query.get("team"))
        raw = request.query.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 500:
            raise InvalidRequest("'limit' must be a whole number from 1 to 500.", param="limit")
        scored = {"false": False, "true": True}.get(request.query.get("scored", ""))
        which = ReviewFilter(team, request.query.get("alias"), scored, int(raw))
        rows = await self._reports.reviews(which)
        return json_reply({"object": "list", "rubric": list(self._config().review_rubric),
                           "data": rows})  # fmt: skip

    async def score_review(self, request: web.Request) -> web.Response:
        actor = self._access.admin(request)
        body = await read_json(request, 1 << 16)
        scores = self._reports.check_scores(body.get("scores"))
        request_id = request.match_info["request_id"]
        team = None if actor.is_master else (actor.team_id or "")
        mean = await self._reports.score(request_id, scores, actor.key_id, team)
        await self._access.record(actor, "insights.review", request_id, scores)
        return json_reply({"object": "insights.review", "request_id": request_id,
                           "scores": scores, "score": mean})  # fmt: skip
