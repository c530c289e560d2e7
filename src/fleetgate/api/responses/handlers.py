"""``/v1/responses`` routes: create (JSON or streamed events), retrieve, list the input
items of, and delete.

``POST`` validates the request (``request``), reads the conversation of
``previous_response_id`` (``store``, the caller's tenant only), and sends the chat request it
translates to through the same path as ``/v1/chat/completions`` (`REQUEST_PATH`: keys,
limits, budgets, input/output/stream checks, routing, retries, spend, audit) with a
`ResponsesWire` that answers in the Responses shape. A stored response (``store``, on by
default) is written before the client gets its answer: the JSON body, or the stream's last
event. Errors are OpenAI error objects, as on every other route.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from fleetgate.api.path import RequestPath
from fleetgate.api.responses.config import ResponsesConfig
from fleetgate.api.responses.output import ResponseMeta, Turn, assistant_messages
from fleetgate.api.responses.recorder import bind_recorder
from fleetgate.api.responses.request import chat_body, parse_request
from fleetgate.api.responses.store import ResponseStore
from fleetgate.api.responses.wire import ResponsesWire, SaveResponse
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.errors import InvalidRequest
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["ResponsesRoutes"]

log = logging.getLogger("fleetgate.responses")


class ResponsesRoutes:
    """The route handlers; ``prepare`` migrates the store (once) before its first use;
    ``path``: the request path a create runs."""

    def __init__(
        self,
        store: ResponseStore,
        config: Callable[[], ResponsesConfig],
        prepare: Callable[[], Awaitable[None]],
        path: RequestPath,
    ) -> None:
        self.store = store
        self.config = config
        self.prepare = prepare
        self.path = path

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/responses", store_unavailable_is_503(self.create)),
            web.get("/v1/responses/{id}", store_unavailable_is_503(self.retrieve)),
            web.get("/v1/responses/{id}/input_items", store_unavailable_is_503(self.input_items)),
            web.delete("/v1/responses/{id}", store_unavailable_is_503(self.delete)),
        ]

    async def create(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        path = self.path
        principal = self._principal(request)
        parsed = parse_request(await path.read_body(request))
        path.check_model(principal, parsed.model)
        config = self.config()
        history: list[dict[str, Any]] = []
        if parsed.previous_response_id is not None:
            await self.prepare()
            history = await self.store.history(
                principal.tenant, parsed.previous_response_id, config.max_turns
            )
        body = chat_body(parsed, history)
        new = body["messages"][len(history) + (1 if parsed.instructions else 0) :]
        save = self._saver(principal.tenant, new, parsed.items, config) if parsed.store else None
        wire = ResponsesWire(ResponseMeta(parsed), save)
        record = bind_recorder(wire)

        def bind(req: GatewayRequest) -> None:
            req.responses = parsed.native  # a native upstream is sent /v1/responses
            record(req)

        response = await path.serve(request, Endpoint.CHAT, principal, body, started, wire, bind)
        if not parsed.stream and wire.final is not None and response.status == 200:
            await wire.save(None)
        return response

    def _saver(
        self,
        owner: str,
        new: list[dict[str, Any]],
        items: list[dict[str, Any]],
        config: ResponsesConfig,
    ) -> SaveResponse:
        async def save(final: dict[str, Any], turn: Turn) -> None:
            try:
                await self.prepare()
                await self.store.save(owner, final, [*new, *assistant_messages(turn)],
                                      config.retention_s, items)  # fmt: skip
            except Exception:  # the client still gets its answer; it cannot continue from it
                log.exception("response %s was not stored", final.get("id"))

        return save

    def _principal(self, request: web.Request) -> Principal:
        """The caller, whose role must allow calls (a finance viewer reads no stored answer)."""
        return self.path.authenticate(request).require("call")

    async def retrieve(self, request: web.Request) -> web.Response:
        principal = self._principal(request)
        await self.prepare()
        found = await self.store.get(principal.tenant, request.match_info["id"])
        return _json(found)

    async def input_items(self, request: web.Request) -> web.Response:
        """A page of the response's input items (``limit`` 1-100, default 20; ``order``
        ``desc`` (default) or ``asc``; ``after``: the last id of the previous page)."""
        principal = self._principal(request)
        limit, order, after = _page(request)
        await self.prepare()
        items = await self.store.input_items(principal.tenant, request.match_info["id"])
        if order == "desc":
            items = items[::-1]
        if after is not None:
            ids = [i.get("id") for i in items]
            if after not in ids:
                raise InvalidRequest(f"No input item with id '{after}'.", param="after")
            items = items[ids.index(after) + 1 :]
        page = items[:limit]
        return _json({
            "object": "list", "data": page, "has_more": len(items) > limit,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        })  # fmt: skip

    async def delete(self, request: web.Request) -> web.Response:
        principal = self._principal(request)
        await self.prepare()
        response_id = request.match_info["id"]
        await self.store.delete(principal.tenant, response_id)
        return _json({"id": response_id, "object": "response", "deleted": True})


def _page(request: web.Request) -> tuple[int, str, str | None]:
    query = request.query
    raw = query.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise InvalidRequest("'limit' must be an integer from 1 to 100.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be asc or desc.", param="order")
    return int(raw), order, query.get("after")


def _json(data: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")
