"""The playground: a multi-turn chat that streams, sent through the gateway's own
``/v1/chat/completions`` with the signed-in user's credential, so it is authorized, limited,
guarded, billed and audited like any API call. The page keeps the conversation (each turn is
sent with the ones before it) and sends an optional system prompt, ``temperature`` and
``max_tokens``; this handler checks their shape and range before passing them on. The
answer's disclosure headers (the serving model's registered name and filing number, when the
disclosure feature is on) are passed on too, and the page shows them under the answer."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from fleetgate.console.core import Console
from fleetgate.disclosure.feature import MODEL_HEADER, NUMBER_HEADER
from fleetgate.errors import InvalidRequest, ServiceUnavailable
from fleetgate.http import read_json
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["Playground"]

PLAYGROUND_ROLES = ("master", "team_admin", "user")
RELAYED = (MODEL_HEADER, NUMBER_HEADER)  # the answer's headers the page reads
MAX_TURNS = 200  # messages in one conversation
_ROLES = ("system", "user", "assistant")


def _messages(raw: Any) -> list[dict[str, str]]:
    """The conversation as sent: system, user and assistant turns of text (400 otherwise)."""
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty list", param="messages")
    if len(raw) > MAX_TURNS:
        raise InvalidRequest(f"A conversation holds at most {MAX_TURNS} messages; start a new one.",
                             param="messages")  # fmt: skip
    out = []
    for m in raw:
        if not (isinstance(m, dict) and m.get("role") in _ROLES
                and isinstance(m.get("content"), str)):  # fmt: skip
            raise InvalidRequest(
                "Each message is {role: system, user or assistant, content: text}",
                param="messages",
            )
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _parameters(body: dict[str, Any]) -> dict[str, Any]:
    """``temperature`` (0 to 2) and ``max_tokens`` (a whole number from 1), when given."""
    out: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not (0 <= temperature <= 2)
        ):
            raise InvalidRequest("Temperature must be a number from 0 to 2", param="temperature")
        out["temperature"] = float(temperature)
    max_tokens = body.get("max_tokens")
    if max_tokens is not None:
        if (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not (1 <= max_tokens <= 1_000_000)
        ):
            raise InvalidRequest("Max tokens must be a whole number of 1 or more",
                                 param="max_tokens")  # fmt: skip
        out["max_tokens"] = max_tokens
    return out


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
        """``{"model": alias, "messages": [...], "temperature"?, "max_tokens"?}`` -> the
        gateway's SSE stream, relayed."""
        session = await self.console.require(request, PLAYGROUND_ROLES)
        body = await read_json(request, self.console.max_request_bytes)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequest("'model' must name an alias", param="model")
        messages = _messages(body.get("messages"))
        parameters = _parameters(body)
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
                **parameters,
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
            for name in RELAYED:
                if name in upstream.headers:
                    response.headers[name] = upstream.headers[name]
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
