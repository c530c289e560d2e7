"""``GET /v1/models``: the aliases this caller may use (but ``hidden`` ones; those are still
answered by name, ``GET /v1/models/{model}``, as they route)."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.errors import ModelNotFound

__all__ = ["get_model", "list_models"]

_CREATED = int(time.time())


def _entry(alias: str) -> dict[str, object]:
    return {"id": alias, "object": "model", "created": _CREATED, "owned_by": "fleetgate"}


async def list_models(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    principal = gw.core.auth.authenticate_request(request.headers)
    data = [_entry(a) for a in gw.tables.table.listed_aliases() if principal.may_use(a)]
    return web.Response(
        body=orjson.dumps({"object": "list", "data": data}), content_type="application/json"
    )


async def get_model(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    principal = gw.core.auth.authenticate_request(request.headers)
    alias = request.match_info["model"]
    if alias not in gw.tables.table.aliases() or not principal.may_use(alias):
        raise ModelNotFound(f"The model '{alias}' does not exist.", param="model")
    return web.Response(body=orjson.dumps(_entry(alias)), content_type="application/json")
