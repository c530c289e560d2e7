"""The ``canary`` feature: traffic splits per deployment version (always on).

The splits are stored in the database, followed by the dispatcher and by every replica
(`fleetgate.routing.canary`); the ``/admin/aliases/{alias}/split`` and ``/admin/splits`` routes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.feature import BaseFeature
from fleetgate.http import AdminAccess
from fleetgate.resources import Resources
from fleetgate.routing.admin_routes import CanaryAdmin
from fleetgate.routing.canary import CanarySplits
from fleetgate.routing.table import RouteTable

__all__ = ["CanaryFeature"]


class CanaryFeature(BaseFeature):
    name = "canary"

    def __init__(self, splits: CanarySplits, admin: CanaryAdmin) -> None:
        self.splits = splits
        self._admin = admin

    @classmethod
    def build(
        cls,
        settings: Settings,
        config: GatewayConfig,
        table: Callable[[], RouteTable],
        access: AdminAccess,
        resources: Resources,
    ) -> CanaryFeature:
        database = resources.databases.get(settings.database_url, settings.data_dir)
        splits = CanarySplits(resources.shared, database)
        admin = CanaryAdmin(splits, table, access, config.server.max_request_bytes)
        return cls(splits, admin)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def missing(self) -> list[str]:
        return [] if self.splits.loaded else ["database"]

    async def start(self) -> None:
        await self.splits.start()

    async def aclose(self) -> None:
        await self.splits.aclose()
