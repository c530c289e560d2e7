"""Guardrails as a gateway feature (only when the config has a ``safety:`` section).

The `SafetyStage` joins the request path after the multimodal stage (its checks see transcripts
and image descriptions); its audit verdicts go to the store (``fg_safety_audit``, through
tenancy's batched record writer) or, without tenancy, to ``<data_dir>/safety-audit.jsonl``; a key
reaching ``audit.suspend_after`` violations is revoked through the tenancy service, which reloads
every replica's key cache. Admin policy overrides and violation counts live in the database, so
every replica applies the same policies and counts toward the same suspension. Without a
``safety:`` section (or with ``enabled: false``) it is not built and the app answers the
``/admin/safety`` routes 503 ``feature_disabled`` (`fleetgate.feature.Switch`).
See docs/safety.md.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.contract.principal import Principal
from fleetgate.contract.stages import Stage
from fleetgate.core import Core
from fleetgate.errors import FleetgateError
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import AdminAccess
from fleetgate.safety.admin_routes import SafetyAdmin
from fleetgate.safety.config import SAFETY_SECTION
from fleetgate.safety.ports import GUARDRAIL_EVENTS, SAFETY
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.safety.sinks import AuditLog, JsonlAuditLog, StoreAuditLog
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["SAFETY_ACTOR", "SafetyFeature"]

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


class SafetyFeature(BaseFeature):
    name = "safety"
    sections = (SAFETY_SECTION,)
    switch = Switch("safety", opt_in=True)
    admin_routes = (
        ("GET", "/admin/safety/policies"), ("GET", "/admin/safety/policies/{name}"),
        ("PUT", "/admin/safety/policies/{name}"), ("PUT", "/admin/safety/aliases/{target}"),
        ("DELETE", "/admin/safety/aliases/{target}"), ("PUT", "/admin/safety/teams/{target}"),
        ("DELETE", "/admin/safety/teams/{target}"), ("GET", "/admin/safety/audit"),
    )  # fmt: skip

    def __init__(self, runtime: SafetyRuntime, audit_log: AuditLog, access: AdminAccess) -> None:
        self.runtime = runtime
        self.audit_log = audit_log
        self.stage: Stage | None = runtime.stage
        self._admin = SafetyAdmin(runtime, audit_log, access)

    @classmethod
    def build(cls, core: Core) -> SafetyFeature | None:
        """Provides `SAFETY` (the input and output policy) and `GUARDRAIL_EVENTS`; records
        in tenancy's store when `TENANCY` is provided, else in a JSONL file."""
        cfg = SAFETY_SECTION.of(core.config)
        if cfg is None:  # the app builds it only when the section is there
            return None
        settings, resources, registry = core.settings, core.resources, core.metrics.registry
        tenancy, access = core.ports.get(TENANCY), core.access
        audit_log: AuditLog
        if tenancy is not None:
            audit_log = StoreAuditLog(tenancy.writer, tenancy.db)
        else:
            audit_log = JsonlAuditLog(settings.data_dir / "safety-audit.jsonl")
        runtime = SafetyRuntime(
            cfg, registry, data_dir=settings.data_dir, sink=audit_log.write,
            on_suspend=_suspender(tenancy), team_name=_team_name(tenancy), resources=resources,
            database=resources.databases.get(settings.database_url, settings.data_dir),
        )  # fmt: skip
        core.ports.provide(SAFETY, runtime)
        core.ports.provide(GUARDRAIL_EVENTS, audit_log)
        return cls(runtime, audit_log, access)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        new = SAFETY_SECTION.of(config)
        if new is None or not new.enabled:
            log.warning("turning safety off takes a restart; the current policies stay")
        elif new != self.runtime.base:
            self.runtime.set_base(new)

    async def start(self) -> None:
        await self.runtime.start()

    async def aclose(self) -> None:
        await self.runtime.aclose()
