"""The ``scheduling`` feature: admission queues per deployment pool (stage ``scheduling``).

Built with the app; its stage sits last on the request path (after tenancy, multimodal and
safety; see `fleetgate.scheduling.stage`). With ``scheduling.enabled: false`` it is not built
(`fleetgate.feature.Switch`) and the app answers ``/admin/queues`` 503 ``feature_disabled``.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import AdminAccess
from fleetgate.routing.ports import ENGINE_ROUTING, TABLES
from fleetgate.scheduling.admin_routes import SchedulingAdmin
from fleetgate.scheduling.config import SCHEDULING_SECTION
from fleetgate.scheduling.fleet import fleet_link
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.ports import SCHEDULER
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.scheduling.stage import SchedulingStage

__all__ = ["SchedulingFeature"]


class SchedulingFeature(BaseFeature):
    name = "scheduling"
    sections = (SCHEDULING_SECTION,)
    switch = Switch("scheduling")
    admin_routes = (("GET", "/admin/queues"), ("GET", "/admin/scheduling/decisions"))

    def __init__(self, scheduler: Scheduler, access: AdminAccess) -> None:
        self.scheduler = scheduler
        self.stage = SchedulingStage(scheduler)
        self._admin = SchedulingAdmin(scheduler, access)

    @classmethod
    def build(cls, core: Core) -> SchedulingFeature:
        """Provides `SCHEDULER`. With engine-aware routing (`ENGINE_ROUTING`), the engines'
        last scrapes feed the signals and each queued admission goes to the decision log."""
        section = SCHEDULING_SECTION.of(core.config)
        tables, routing = core.ports.require(TABLES), core.ports.get(ENGINE_ROUTING)
        scheduler = Scheduler(
            section,
            lambda: tables.table,
            SchedulingMetrics(core.metrics.registry),
            routing.stats.fresh_snapshot if routing is not None else None,
            decisions=routing.decisions if routing is not None else None,
            link=fleet_link(core, section),  # shared through Redis when configured
        )
        core.ports.provide(SCHEDULER, scheduler)
        return cls(scheduler, core.access)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        self.scheduler.reconfigure(SCHEDULING_SECTION.of(config))

    async def start(self) -> None:
        await self.scheduler.start()

    async def aclose(self) -> None:
        await self.scheduler.aclose()
