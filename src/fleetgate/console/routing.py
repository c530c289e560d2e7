"""Routing decisions (master): the engine-aware router's sampled decision log, newest first,
filtered by alias and reason, with each alias's prefix-cache hit ratio (what
``GET /admin/routing/decisions`` serves)."""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from fleetgate.console.core import Console
from fleetgate.console.forms import page_number, page_of

__all__ = ["RoutingPage"]


class RoutingPage:
    def __init__(self, console: Console) -> None:
        self.console = console

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/ui/routing", self.page)]

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ("master",))
        q = request.query
        alias = q.get("alias", "").strip() or None
        reason = q.get("reason", "").strip() or None
        page = page_number(q.get("page"))
        size = self.console.config.page_size
        routing = self.console.engine_routing
        found = []
        ratios: dict[str, float | None] = {}
        if routing is not None:  # the log keeps at most a few thousand: paging it is cheap
            found = routing.decisions.query(alias=alias, reason=reason, limit=page * size + 1)
            ratios = {a: routing.decisions.hit_ratio(a) for a in sorted({d.alias for d in found})}
        query = urlencode({k: v for k, v in {"alias": alias, "reason": reason}.items() if v})
        rows, more = page_of(found, page, size)
        return self.console.page(
            request, session, "routing.html", rows=rows, more=more, page=page, alias=alias or "",
            reason=reason or "", query=query, ratios=ratios, on=routing is not None,
        )  # fmt: skip
