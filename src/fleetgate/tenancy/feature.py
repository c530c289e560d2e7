"""Tenancy as a gateway feature: teams, keys, limits, budgets, spend and audit.

On by default (``tenancy.enabled: false`` switches it off: `fleetgate.feature.Switch`). Its stage
authorizes the model, reserves limits before the upstream call and settles and bills after it;
its routes are the ``/admin`` teams, keys, spend and audit API (switched off, the app answers
them 503 ``feature_disabled``). See docs/tenancy.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.contract.principal import Principal
from fleetgate.contract.stages import Stage
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import AdminAccess
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.tenancy.admin_routes import TenancyAdmin
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["TenancyFeature"]


class TenancyFeature(BaseFeature):
    name = "tenancy"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    switch = Switch("tenancy")
    admin_routes = (
        ("POST", "/admin/teams"), ("GET", "/admin/teams"), ("GET", "/admin/teams/{team}"),
        ("POST", "/admin/users"), ("POST", "/admin/keys"), ("GET", "/admin/keys"),
        ("DELETE", "/admin/keys/{key_id}"), ("GET", "/admin/spend"),
        ("GET", "/admin/spend/dead-letters"), ("GET", "/admin/audit"),
    )  # fmt: skip

    def __init__(self, runtime: Tenancy, access: AdminAccess) -> None:
        self.runtime = runtime
        self.stage: Stage | None = runtime.stage
        self._admin = TenancyAdmin(runtime, access)
        access.audit = self

    @classmethod
    def build(cls, core: Core) -> TenancyFeature:
        """Provides `TENANCY` and puts its key cache last in the authenticator chain (every
        token but the master key and those a later feature claims)."""
        runtime = Tenancy(
            core.settings, core.config.tenancy, core.metrics.registry, resources=core.resources
        )
        core.ports.provide(TENANCY, runtime)
        core.auth.add(runtime.cache)
        return cls(runtime, core.access)

    async def record_admin(
        self, actor: Principal, action: str, target: str, detail: Any, *, team_id: str | None = None
    ) -> None:
        """The admin audit log (`fleetgate.http.AdminAudit`) for every feature's admin routes;
        an unreachable database is a 503 (an admin action is not done unaudited)."""
        record = store_unavailable_is_503(self.runtime.service.record_admin)
        await record(actor, action, target, detail, team_id=team_id)

    def missing(self) -> list[str]:
        if not self.runtime.store_ready:
            return ["database"]
        return []

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        self.runtime.reconfigure(config.tenancy)

    async def start(self) -> None:
        await self.runtime.start()

    async def aclose(self) -> None:
        await self.runtime.aclose()
