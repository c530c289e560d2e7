"""Tenancy as a gateway feature: teams, keys, limits, budgets, spend and audit.

On by default (``tenancy.enabled``). Its stage authorizes the model, reserves limits before the
upstream call and settles and bills after it; its routes are the ``/admin`` teams, keys, spend and
audit API (503 when tenancy is off). See docs/tenancy.md.
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
from fleetgate.feature import BaseFeature
from fleetgate.http import AdminAccess
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.tenancy.admin_routes import TenancyAdmin
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["TenancyFeature"]


class TenancyFeature(BaseFeature):
    """``runtime`` is None when ``tenancy.enabled`` is false."""

    name = "tenancy"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions

    def __init__(self, runtime: Tenancy | None, access: AdminAccess) -> None:
        self.runtime = runtime
        self.stage: Stage | None = runtime.stage if runtime is not None else None
        self._admin = TenancyAdmin(runtime, access)
        if runtime is not None:
            access.audit = self

    @classmethod
    def build(cls, core: Core) -> TenancyFeature:
        """Provides `TENANCY` and puts its key cache last in the authenticator chain (every
        token but the master key and those a later feature claims). Off, it provides nothing
        and its admin routes answer 503."""
        if not core.config.tenancy.enabled:
            return cls(None, core.access)
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
        if self.runtime is not None:
            record = store_unavailable_is_503(self.runtime.service.record_admin)
            await record(actor, action, target, detail, team_id=team_id)

    def missing(self) -> list[str]:
        if self.runtime is not None and not self.runtime.store_ready:
            return ["database"]
        return []

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        if self.runtime is not None:
            self.runtime.reconfigure(config.tenancy)

    async def start(self) -> None:
        if self.runtime is not None:
            await self.runtime.start()

    async def aclose(self) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()
