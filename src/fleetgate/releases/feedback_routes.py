"""Feedback routes.

- ``POST /v1/feedback`` (any valid key) ``{"request_id" | "response_id", "rating": "up"|"down"
  | "score": 0..1, "comment"?, "tags"?}``: 201 with what was stored. ``request_id`` is the
  ``x-request-id`` header of the answer, ``response_id`` the ``id`` of its body (known for
  aliases that follow the registry). 404, telling nothing, unless the store holds that answer
  as served to the caller (`fleetgate.releases.feedback.FeedbackStore.served`).
- ``GET /admin/registry/quality?alias=&window_s=86400`` (master key): by alias and version,
  requests, feedback, negative feedback and its rate, mean score, regenerations.
- ``GET /admin/registry/flywheel?alias=&window_s=604800&regenerations=true&limit=1000``
  (master key): bad cases as eval items (`fleetgate.releases.flywheel`), ``{"data": [...],
  "skipped": {"blocked": n, "no_payload": n}}``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from fleetgate.api.schemas import validate_request
from fleetgate.errors import InvalidRequest
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.releases.feedback import FeedbackSpec, FeedbackStore
from fleetgate.releases.flywheel import bad_cases
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["FeedbackRoutes"]


class FeedbackRoutes:
    def __init__(
        self,
        store: FeedbackStore,
        access: AdminAccess,
        prepare: Callable[[], Awaitable[None]],
        max_body_bytes: int,
        regen_window_s: Callable[[], float] = lambda: 600.0,
    ) -> None:
        self.regen_window_s = regen_window_s
        self.store = store
        self.access = access
        self.prepare = prepare
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/feedback", store_unavailable_is_503(self.give)),
            web.get("/admin/registry/quality", store_unavailable_is_503(self.quality)),
            web.get("/admin/registry/flywheel", store_unavailable_is_503(self.flywheel)),
        ]

    async def give(self, request: web.Request) -> web.Response:
        who = self.access.principal(request)
        body = await read_json(request, self.max_body_bytes)
        if isinstance(body, dict) and "request_id" not in body and "response_id" not in body:
            raise InvalidRequest(
                "Name the answer: 'request_id' (its x-request-id header) or 'response_id' "
                "(the id of its body).",
                param="request_id",
            )
        spec = validate_request(FeedbackSpec, body)
        assert isinstance(spec, FeedbackSpec)
        await self.prepare()
        return json_reply(await self.store.record(who, spec), 201)

    async def quality(self, request: web.Request) -> web.Response:
        self.access.master(request)
        since_ms = _since_ms(request, "86400")
        await self.prepare()
        rows = await self.store.quality(
            since_ms=since_ms,
            alias=request.query.get("alias"),
            regen_window_s=self.regen_window_s(),
        )
        return json_reply({"data": rows})

    async def flywheel(self, request: web.Request) -> web.Response:
        self.access.master(request)
        since_ms = _since_ms(request, "604800")
        raw = request.query.get("limit", "1000")
        if not raw.isdigit() or not 1 <= int(raw) <= 100_000:
            raise InvalidRequest("'limit' must be an integer in 1..100000.", param="limit")
        regen = request.query.get("regenerations", "true")
        if regen not in ("true", "false"):
            raise InvalidRequest("'regenerations' must be true or false.", param="regenerations")
        await self.prepare()
        items, skipped = await bad_cases(
            self.store.db, since_ms=since_ms, alias=request.query.get("alias"),
            regenerations=regen == "true", regen_window_s=self.regen_window_s(), limit=int(raw),
        )  # fmt: skip
        return json_reply({"data": items, "skipped": skipped})


def _since_ms(request: web.Request, default: str) -> int:
    raw = request.query.get("window_s", default)
    if not raw.isdigit() or not 1 <= int(raw) <= 366 * 86400:
        raise InvalidRequest("'window_s' must be an integer of seconds.", param="window_s")
    return int((time.time() - int(raw)) * 1000)
