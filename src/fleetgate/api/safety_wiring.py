"""Wire the guardrails into an app (called by `create_app` after the multimodal stage).

Only when the config has a ``safety:`` section: the `SafetyStage` joins the request path, its
audit verdicts go to the store (``fg_safety_audit``, through tenancy's batched record writer) or,
without tenancy, to ``<data_dir>/safety-audit.jsonl``; a key reaching ``audit.suspend_after``
violations is revoked through the tenancy service, which reloads every replica's key cache.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from fleetgate.api.admin_safety import SAFETY, SAFETY_AUDIT, add_safety_routes
from fleetgate.api.admin_tenancy import TENANCY
from fleetgate.api.state import GatewayState
from fleetgate.config.settings import Settings
from fleetgate.errors import FleetgateError
from fleetgate.routing.table import RouteTable
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.safety.sinks import AuditLog, JsonlAuditLog, StoreAuditLog
from fleetgate.tenancy.principal import Principal
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["SAFETY_ACTOR", "add_safety"]

log = logging.getLogger("fleetgate.safety")

SAFETY_ACTOR = Principal(key_id="safety-audit", role="master")
"""The actor recorded in the admin audit log when the safety audit suspends a key."""


def _suspender(tenancy: Tenancy | None) -> Callable[[str], Awaitable[None]]:
    async def suspend(key_id: str) -> None:
        if tenancy is None:
            log.warning("key %s reached the violation limit; tenancy is off, not suspended", key_id)
            return
        try:
            await tenancy.service.revoke_key(SAFETY_ACTOR, key_id)
        except FleetgateError as exc:  # the master key, or a key already gone
            log.warning("could not suspend key %s: %s", key_id, exc.message)
            return
        log.warning("key %s suspended after repeated safety violations", key_id)

    return suspend


def _team_name(tenancy: Tenancy | None) -> Callable[[str], str | None] | None:
    if tenancy is None:
        return None

    def name(team_id: str) -> str | None:
        entry = tenancy.cache.team(team_id)
        return entry.name if entry is not None else None

    return name


def add_safety(app: web.Application, settings: Settings, gw: GatewayState) -> None:
    """The safety stage, its audit sink, admin routes and lifespan (if ``safety:`` is set)."""
    add_safety_routes(app)
    cfg = gw.tables.table.config.safety
    if cfg is None or not cfg.enabled:
        return
    tenancy = app.get(TENANCY)
    audit_log: AuditLog
    if tenancy is not None:
        audit_log = StoreAuditLog(tenancy.writer, tenancy.db)
    else:
        audit_log = JsonlAuditLog(settings.data_dir / "safety-audit.jsonl")
    runtime = SafetyRuntime(
        cfg, gw.metrics.registry, data_dir=settings.data_dir, sink=audit_log.write,
        on_suspend=_suspender(tenancy), team_name=_team_name(tenancy),
    )  # fmt: skip
    gw.stages.append(runtime.stage)
    app[SAFETY] = runtime
    app[SAFETY_AUDIT] = audit_log

    def on_reload(table: RouteTable) -> None:
        new = table.config.safety
        if new is None or not new.enabled:
            log.warning("turning safety off takes a restart; the current policies stay")
        elif new != runtime.base:
            runtime.set_base(new)

    gw.tables.subscribe(on_reload)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        await runtime.start()
        yield
        await runtime.stop()

    app.cleanup_ctx.append(lifespan)
