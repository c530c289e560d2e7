"""The admin API of the core (master key only): config inspection and reload."""

from __future__ import annotations

from aiohttp import web

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.config.redact import redact_config
from fleetgate.config.reload import restart_sections
from fleetgate.contract.principal import Principal
from fleetgate.errors import ConfigError, InvalidRequest
from fleetgate.http import AdminAccess, json_reply

__all__ = ["get_config", "reload_config"]


def _master(request: web.Request) -> tuple[GatewayState, AdminAccess, Principal]:
    gw = request.app[GATEWAY]
    return gw, gw.core.access, gw.core.access.master(request)


async def reload_config(request: web.Request) -> web.Response:
    """Re-read the config file; an invalid file is refused (400) and the old config kept.

    The answer names what took effect (``applied``), what waits for a restart
    (``restart_required``) and the features that failed to take it (``not_applied``);
    ``status`` is ``applied`` only when nothing waits or failed (`fleetgate.config.reload`)."""
    gw, access, actor = _master(request)
    try:
        table = gw.tables.reload("admin")  # counted by the table manager's on_reload
    except ConfigError as exc:
        await access.record(actor, "config.reload", "refused", {"error": exc.message})
        raise InvalidRequest(f"Config refused, the old one is kept: {exc.message}") from None
    change = gw.tables.change.as_json()
    await access.record(actor, "config.reload", change["status"],
                        {"generation": gw.tables.generation, **change})  # fmt: skip
    return json_reply({**change, "generation": gw.tables.generation,
                       "aliases": table.aliases()})  # fmt: skip


async def get_config(request: web.Request) -> web.Response:
    """The config last loaded, every secret redacted (`fleetgate.config.redact`), and the
    parts of it that wait for a restart to take effect (``restart_required``)."""
    gw, _, _ = _master(request)
    data = redact_config(gw.tables.table.config.model_dump(mode="json"))
    pending = restart_sections(gw.tables.started, gw.tables.source, gw.tables.reload_rules)
    return json_reply({"generation": gw.tables.generation, "config": data,
                       "restart_required": pending})  # fmt: skip
