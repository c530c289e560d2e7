"""The ``base_url`` forms LiteLLM clients use, served by the gateway's own ``/v1`` routes.

LiteLLM's proxy answers the OpenAI API both under ``/v1`` and at the root, so its users point
SDKs at ``http://proxy:4000`` as often as at ``http://proxy:4000/v1``; Azure OpenAI SDKs pointed
at it call ``/openai/deployments/{model}/chat/completions`` (the model is also in the body).
Each such request is answered by the handler the app's router finds for its ``/v1`` path, as
if it had been sent there: one request path, one authentication, whatever feature serves the
``/v1`` route (and the gateway's "not supported" answer for what none serves).

Health in LiteLLM's words: ``/health/liveliness`` (and ``/health/liveness``) answer
``"I'm alive!"``; ``/health/readiness`` asks the gateway's ``/health/ready`` and answers
``{"status": "healthy", "db": "connected", ...}`` (503 with ``"status": "unhealthy"`` when
the gateway is not ready).
"""

from __future__ import annotations

import json

from aiohttp import web
from yarl import URL

from fleetgate.http import json_reply

__all__ = ["FAMILIES", "forward", "routes"]

# The OpenAI API path families LiteLLM serves at the root as well as under /v1.
FAMILIES = (
    "chat/completions", "completions", "embeddings", "models", "moderations", "images",
    "audio", "files", "batches", "responses", "rerank", "assistants", "threads",
    "fine_tuning", "vector_stores",
)  # fmt: skip
_BARE = "/{tail:(?:" + "|".join(FAMILIES) + ")(?:/.*)?}"
_AZURE = (
    "/{prefix:(?:openai/deployments|engines)}/{model:[^/]+}"
    "/{tail:(?:chat/completions|completions|embeddings)}"
)


async def _call(request: web.Request, url: URL) -> web.StreamResponse:
    """Answer ``request`` with the handler the app's router has for ``url``."""
    clone = request.clone(rel_url=url)
    match = await request.app.router.resolve(clone)
    if match.http_exception is not None:
        raise match.http_exception
    # A request's match info is set by the app as it dispatches (aiohttp has no public
    # setter); the clone must carry the /v1 route's (its {id}, {model}), not this route's.
    match.add_app(request.app)
    match.freeze()
    clone._match_info = match  # noqa: SLF001
    return await match.handler(clone)


async def _call_v1(request: web.Request, path: str) -> web.StreamResponse:
    return await _call(request, request.rel_url.with_path(path))


async def forward(request: web.Request) -> web.StreamResponse:
    """``/<family>/...`` -> ``/v1/<family>/...``."""
    return await _call_v1(request, "/v1/" + request.match_info["tail"])


async def azure(request: web.Request) -> web.StreamResponse:
    """``/openai/deployments/{model}/<op>`` -> ``/v1/<op>`` (the body names the model)."""
    return await _call_v1(request, "/v1/" + request.match_info["tail"])


async def liveliness(request: web.Request) -> web.Response:
    return json_reply("I'm alive!")


async def readiness(request: web.Request) -> web.Response:
    """LiteLLM's readiness answer from the gateway's own ``/health/ready``."""
    answer = await _call(request, URL("/health/ready"))
    ready = answer.status == 200
    raw = answer.body if isinstance(answer, web.Response) else None
    body = json.loads(raw) if isinstance(raw, (bytes, bytearray)) and raw else {}
    missing = [str(m) for m in body.get("missing", [])]
    return json_reply(
        {
            "status": "healthy" if ready else "unhealthy",
            "db": "Not connected" if any(m.endswith("database") for m in missing) else "connected",
            "cache": None,
            "litellm_version": None,
            "success_callbacks": [],
            "fleetgate": body,
        },
        200 if ready else 503,
    )


def routes() -> list[web.RouteDef]:
    return [
        web.route("*", _BARE, forward),
        web.post(_AZURE, azure),
        web.get("/health/liveliness", liveliness),
        web.get("/health/liveness", liveliness),
        web.get("/health/readiness", readiness),
    ]
