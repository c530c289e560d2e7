"""Team document collections for retrieval (``prompts.<alias>.retrieval``).

``PUT /admin/teams/{team}/documents/{doc_id}`` with ``{"text": "..."}`` indexes (or re-indexes)
one document with sentence embeddings; ``DELETE`` removes it. The master key may manage any
team's documents, a team admin key only its own team's. Documents and their embeddings are
stored in the database, so every replica retrieves them and a restart keeps them (503
``store_unavailable`` while the database is away). ``multimodal.inputs`` bounds
one document (``document_chars``) and a team's whole collection (``team_document_bytes``,
``team_documents``: 413 past them).

``GET /admin/documents/kv[?team=]``: KV hit rate by tenant and document set, the first request
after the newest change and each alias's last prewarm (`fleetgate.multimodal.document_kv`); the
master key sees every team, a team admin key its own.
"""

from __future__ import annotations

from functools import partial

import orjson
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.errors import InvalidRequest, NotFound, PermissionDenied
from fleetgate.http.body import read_json
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.multimodal.tables import documents
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.store.fields import require_fits

__all__ = ["document_routes"]


def document_routes(runtime: MultimodalRuntime) -> list[web.RouteDef]:
    """The document routes over ``runtime`` (served when the multimodal pipeline is on)."""
    return [
        web.put("/admin/teams/{team}/documents/{doc_id}", partial(put_document, runtime)),
        web.delete("/admin/teams/{team}/documents/{doc_id}", partial(delete_document, runtime)),
        web.get("/admin/documents/kv", partial(document_kv, runtime)),
    ]


def _authorized(request: web.Request) -> str:
    gw = request.app[GATEWAY]
    principal = gw.core.auth.authenticate_request(request.headers)
    team = request.match_info["team"]
    if not (principal.is_master or (principal.role == "team_admin" and principal.team_id == team)):
        raise PermissionDenied(
            "Only the master key or this team's admin key manages its documents."
        )
    require_fits(team, documents.c.team, "team")
    require_fits(request.match_info["doc_id"], documents.c.doc_id, "doc_id")
    return team


@store_unavailable_is_503
async def put_document(runtime: MultimodalRuntime, request: web.Request) -> web.Response:
    team = _authorized(request)
    gw = request.app[GATEWAY]
    body = await read_json(request, gw.max_request_bytes, gw.body_timeout_s)
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("'text' must be a non-empty string", param="text")
    limit = runtime.inputs.document_chars
    if len(text) > limit:
        raise InvalidRequest(f"'text' is longer than {limit} characters", param="text")
    doc_id = request.match_info["doc_id"]
    chunks = await runtime.index.add(team, doc_id, text)
    out = {"team": team, "id": doc_id, "chunks": chunks}
    return web.Response(body=orjson.dumps(out), content_type="application/json")


@store_unavailable_is_503
async def delete_document(runtime: MultimodalRuntime, request: web.Request) -> web.Response:
    team = _authorized(request)
    doc_id = request.match_info["doc_id"]
    await runtime.index.remove(team, doc_id)
    out = {"team": team, "id": doc_id, "deleted": True}
    return web.Response(body=orjson.dumps(out), content_type="application/json")


async def document_kv(runtime: MultimodalRuntime, request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    principal = gw.core.auth.authenticate_request(request.headers)
    team = request.query.get("team") or None
    if not principal.is_master:
        if principal.role != "team_admin" or principal.team_id is None:
            raise PermissionDenied("Only the master key or a team admin key reads KV hit rates.")
        if team is not None and team != principal.team_id:
            raise PermissionDenied("A team admin key reads its own team's KV hit rates only.")
        team = principal.team_id
    if runtime.document_kv is None:
        raise NotFound("Retrieval is off: the multimodal pipeline is disabled in the config.")
    out = {"data": runtime.document_kv.snapshot(team)}
    return web.Response(body=orjson.dumps(out), content_type="application/json")
