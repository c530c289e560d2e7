"""Admin API of canary splits (master key only).

- ``PUT /admin/aliases/{alias}/split`` ``{"weights": {"v1": 90, "v2": 10}, "sticky": true}``:
  set the alias's traffic percentages per deployment version; every replica follows within a
  second. Rollback is the same call with the old weights.
- ``GET /admin/aliases/{alias}/split``: the split in force here, and the alias's versions.
- ``DELETE /admin/aliases/{alias}/split``: no split (every version, by the alias's strategy).
- ``GET /admin/splits``: every split in force.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from fleetgate.api.admin import require_master
from fleetgate.api.body import read_json
from fleetgate.errors import InvalidRequest
from fleetgate.routing.canary import CanarySplits, Split

__all__ = ["CANARY", "add_canary_routes"]

CANARY = web.AppKey("fleetgate.canary", CanarySplits)


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


def _alias_versions(request: web.Request) -> tuple[str, list[str]]:
    gw, _ = require_master(request)
    alias = request.match_info["alias"]
    route = gw.tables.table.route(alias)  # ModelNotFound (404) for an unknown alias
    return alias, sorted({d.version for d in route.deployments})


def _view(alias: str, versions: list[str], split: Split | None) -> dict[str, object]:
    return {"alias": alias, "versions": versions,
            "split": split.to_dict() if split is not None else None}  # fmt: skip


async def get_split(request: web.Request) -> web.Response:
    alias, versions = _alias_versions(request)
    return _json(_view(alias, versions, request.app[CANARY].get(alias)))


async def put_split(request: web.Request) -> web.Response:
    alias, versions = _alias_versions(request)
    gw, _ = require_master(request)
    body = await read_json(request, gw.max_request_bytes)
    split = Split.from_dict(body)
    unknown = sorted(set(split.weights) - set(versions))
    if unknown:
        raise InvalidRequest(
            f"alias '{alias}' has no deployment of version(s) {', '.join(unknown)} "
            f"(it has {', '.join(versions)})",
            param="weights",
        )
    stored = await request.app[CANARY].set(alias, split)
    return _json(_view(alias, versions, stored))


async def delete_split(request: web.Request) -> web.Response:
    alias, versions = _alias_versions(request)
    await request.app[CANARY].clear(alias)
    return _json(_view(alias, versions, None))


async def list_splits(request: web.Request) -> web.Response:
    require_master(request)
    splits = request.app[CANARY].all()
    return _json({"data": [{"alias": a, **s.to_dict()} for a, s in sorted(splits.items())]})


def add_canary_routes(app: web.Application) -> None:
    app.router.add_get("/admin/aliases/{alias}/split", get_split)
    app.router.add_put("/admin/aliases/{alias}/split", put_split)
    app.router.add_delete("/admin/aliases/{alias}/split", delete_split)
    app.router.add_get("/admin/splits", list_splits)
