"""The admin API (master key only): config inspection and reload."""

from __future__ import annotations

import orjson
from aiohttp import web

from fleetgate.api.admin_tenancy import record_admin_action
from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.errors import ConfigError, InvalidRequest, PermissionDenied
from fleetgate.tenancy.auth import bearer_token
from fleetgate.tenancy.principal import Principal

__all__ = ["get_config", "reload_config", "require_master"]


def require_master(request: web.Request) -> tuple[GatewayState, Principal]:
    gw = request.app[GATEWAY]
    principal = gw.auth.authenticate(bearer_token(request.headers.get("Authorization")))
    if not principal.is_master:
        raise PermissionDenied("This admin route needs the master key.")
    return gw, principal


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


async def reload_config(request: web.Request) -> web.Response:
    """Re-read the config file; an invalid file is refused (400) and the old config kept."""
    gw, actor = require_master(request)
    try:
        table = gw.tables.reload()
    except ConfigError as exc:
        gw.metrics.config_reloads.labels("refused").inc()
        await record_admin_action(
            request, actor, "config.reload", "refused", {"error": exc.message}
        )
        raise InvalidRequest(f"Config refused, the old one is kept: {exc.message}") from None
    gw.metrics.config_reloads.labels("applied").inc()
    await record_admin_action(
        request, actor, "config.reload", "applied", {"generation": gw.tables.generation}
    )
    return _json({"status": "applied", "generation": gw.tables.generation,
                  "aliases": table.aliases()})  # fmt: skip


async def get_config(request: web.Request) -> web.Response:
    """The live config, with api keys redacted."""
    gw, _ = require_master(request)
    data = gw.tables.table.config.model_dump(mode="json")
    for alias in data.get("models", []):
        for dep in alias.get("deployments", []):
            if dep.get("api_key"):
                dep["api_key"] = "***"
    return _json({"generation": gw.tables.generation, "config": data})
