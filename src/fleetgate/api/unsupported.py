"""OpenAI API paths this gateway does not serve: a 404 that says so, not a bare "Not Found".

A client pointed at the gateway with an OpenAI SDK may call any OpenAI API; for one the gateway
lacks (moderations, images, vector stores, fine-tuning, conversations, ...) it gets

    404 {"error": {"message": "POST /v1/moderations: the OpenAI moderations API is not
         supported by this gateway ...", "type": "invalid_request_error", "param": null,
         "code": "unsupported_endpoint"}}

(`fleetgate.errors.UnsupportedEndpoint`; 404 because the SDKs raise ``NotFoundError`` for it
and do not retry, where a 501 would be retried as a server error). ``route()`` is one
catch-all under ``/v1/``, registered after every feature's routes, so it answers only for
paths nothing else serves; a served path asked with another method keeps its 405.

`FAMILIES` names the path families of the OpenAI API (as its Python SDK calls them) and of
Anthropic's that no feature serves, and those served only when switched on (`SWITCHES`).
"""

from __future__ import annotations

from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.errors import UnsupportedEndpoint

__all__ = ["FAMILIES", "SWITCHES", "route"]

FAMILIES: dict[str, str] = {
    "moderations": "the OpenAI moderations API",
    "images": "the OpenAI images API",
    "audio/translations": "the OpenAI audio translations API",
    "audio/voices": "the OpenAI custom voices API",
    "audio/voice_consents": "the OpenAI custom voices API",
    "vector_stores": "the OpenAI vector stores API",
    "fine_tuning": "the OpenAI fine-tuning API",
    "conversations": "the OpenAI conversations API",
    "assistants": "the OpenAI Assistants API",
    "threads": "the OpenAI Assistants API (threads)",
    "uploads": "the OpenAI uploads API (POST /v1/files is served)",
    "evals": "the OpenAI evals API",
    "containers": "the OpenAI containers API",
    "realtime": "the OpenAI Realtime API",
    "videos": "the OpenAI videos API",
    "chatkit": "the OpenAI ChatKit API",
    "organization": "the OpenAI administration API",
    "projects": "the OpenAI projects API",
    "agents": "the OpenAI agents API",
    "skills": "the OpenAI skills API",
    "vaults": "the OpenAI vaults API",
    "webhook_endpoints": "the OpenAI webhooks API",
    "chat/completions/": "stored chat completions (POST /v1/chat/completions is served)",
    "responses/compact": "the OpenAI responses compaction API",
    "responses/input_tokens": "the OpenAI responses token counting API",
    "messages/batches": "the Anthropic Message Batches API (POST /v1/batches is served)",
    "responses": "the OpenAI Responses API",  # served unless switched off (`SWITCHES`)
    "files": "the OpenAI files API",
    "batches": "the OpenAI batch API",
}

SWITCHES = {"responses": "responses.enabled", "files": "batches.enabled",
            "batches": "batches.enabled"}  # fmt: skip
"""Families served when their config switch was on at start."""


def _switched_on(request: web.Request, switch: str) -> bool:
    config = request.app[GATEWAY].tables.started  # routes are registered once, at start
    section, name = switch.split(".")  # a feature's section: shown with its defaults once read
    return bool(config.model_dump(mode="json").get(section, {}).get(name, False))


def _family(tail: str) -> str | None:
    """The longest family ``tail`` (the path after ``/v1/``) belongs to."""
    best = None
    for family in FAMILIES:
        prefix = family if family.endswith("/") else family + "/"
        if (tail == family or tail.startswith(prefix)) and (
            best is None or len(family) > len(best)
        ):
            best = family
    return best


async def _served_with_other_methods(request: web.Request) -> set[str]:
    """The methods another route serves this path with (a 405, not an unsupported API)."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is request.match_info.route.resource:
            continue
        match, methods = await resource.resolve(request)
        if match is None:
            allowed |= methods
    return allowed


async def unsupported(request: web.Request) -> web.StreamResponse:
    allowed = await _served_with_other_methods(request)
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, sorted(allowed))
    where = f"{request.method} {request.path}"
    family = _family(request.match_info["tail"])
    if family is None:
        raise UnsupportedEndpoint(f"{where} is not an endpoint this gateway serves.")
    api, switch = FAMILIES[family], SWITCHES.get(family)
    if switch is None:
        raise UnsupportedEndpoint(f"{where}: {api} is not supported by this gateway.")
    if _switched_on(request, switch):
        raise UnsupportedEndpoint(f"{where}: this part of {api} is not supported by this gateway.")
    raise UnsupportedEndpoint(f"{where}: {api} is turned off in this gateway's config ({switch}).")


def route() -> web.RouteDef:
    """The catch-all; register it after every other route."""
    return web.route("*", "/v1/{tail:.*}", unsupported)
