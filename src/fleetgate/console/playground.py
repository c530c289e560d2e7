"""The playground: a chat that streams, sent through the gateway's own
``/v1/chat/completions`` with the signed-in user's credential, so it is authorized, limited,
guarded, billed and audited like any API call."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from fleetgate.console.core import Console
from fleetgate.errors import InvalidRequest, ServiceUnavailable
from fleetgate.http import read_json
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["Playground"]

PLAYGROUND_ROLES = ("master", "team_admin", "user")


class Playground:
    def __init__(self, console: Console, http: OutboundHttp) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        self.console = console
        self._http = http

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/playground", self.page),
            web.post("/ui/playground/chat", self.chat),
        ]

    def _aliases(self, request: web.Request) -> list[str]:
        return sorted({d.alias for d in self.console.tables.table.deployments()})

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, PLAYGROUND_ROLES)
        aliases = [a for a in self._aliases(request) if session.principal.may_use(a)]
        return self.console.page(request, session, "playground.html", aliases=aliases)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``{"model": alias, "messages": [...]}`` -> the gateway's SSE stream, relayed."""
        session = await self.console.require(request, PLAYGROUND_ROLES)
        body = await read_json(request, self.console.max_request_bytes)
        model, messages = body.get("model"), body.get("messages")
        if not isinstance(model, str) or not model:
            raise InvalidRequest("'model' must name an alias", param="model")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("'messages' must be a non-empty list", param="messages")
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if not sockname:
            raise ServiceUnavailable("The playground could not find the gateway's own address.")
        host = sockname[0]
        host = f"[{host}]" if ":" in host else host
        upstream = await self._http.session().post(
            f"http://{host}:{sockname[1]}/v1/chat/completions",
            json={
                "model": model,
                "messages": messages,
                "stream": True,
                "stream_options": {"include_usage": True},
            },  # fmt: skip
            headers={
                "Authorization": f"Bearer {session.token}",
                "X-Request-Source": "console-playground",
            },  # fmt: skip
            timeout=aiohttp.ClientTimeout(total=None),  # a long answer streams as long as it takes
        )
        async with upstream:
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            response.headers["Cache-Control"] = "no-store"
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
