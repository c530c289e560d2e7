"""The ``scheduling`` feature: admission queues per deployment pool (stage ``scheduling``).

Built with the app; its stage sits last on the request path (after tenancy, multimodal and
safety; see `fleetgate.scheduling.stage`). With ``scheduling.enabled: false`` it has no stage
and ``/admin/queues`` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.feature import BaseFeature
from fleetgate.http import AdminAccess
from fleetgate.routing.decisions import DecisionLog
from fleetgate.routing.table import RouteTable
from fleetgate.scheduling.admin_routes import SchedulingAdmin
from fleetgate.scheduling.config import SCHEDULING_SECTION
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.pool import Snapshots
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.scheduling.stage import SchedulingStage
from fleetgate.telemetry.registry import Registry

__all__ = ["SchedulingFeature"]


class SchedulingFeature(BaseFeature):
    name = "scheduling"

    def __init__(self, scheduler: Scheduler | None, access: AdminAccess) -> None:
        self.scheduler = scheduler
        self.stage = SchedulingStage(scheduler) if scheduler is not None else None
        self._admin = SchedulingAdmin(scheduler, access)

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        registry: Registry,
        table: Callable[[], RouteTable],
        access: AdminAccess,
        snapshots: Snapshots | None,
        decisions: DecisionLog | None = None,
    ) -> SchedulingFeature:
        """``snapshots``: the engines' last scrapes (engine-aware routing), for the signals;
        ``decisions``: the routing decision log, for the admission of each queued request."""
        section = SCHEDULING_SECTION.of(config)
        if not section.enabled:
            return cls(None, access)
        scheduler = Scheduler(
            section, table, SchedulingMetrics(registry), snapshots, decisions=decisions
        )
        return cls(scheduler, access)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        if self.scheduler is not None:
            self.scheduler.reconfigure(SCHEDULING_SECTION.of(config))

    async def start(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.start()

    async def aclose(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.aclose()
