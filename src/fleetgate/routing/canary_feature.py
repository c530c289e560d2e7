"""The ``canary`` feature: traffic splits per deployment version (always on).

The splits are stored in the database, followed by the dispatcher and by every replica
(`fleetgate.routing.canary`); the ``/admin/aliases/{alias}/split`` and ``/admin/splits`` routes.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from fleetgate.core import Core
from fleetgate.feature import BaseFeature
from fleetgate.routing.admin_routes import CanaryAdmin
from fleetgate.routing.canary import CanarySplits
from fleetgate.routing.ports import CANARY, TABLES

__all__ = ["CanaryFeature"]


class CanaryFeature(BaseFeature):
    name = "canary"

    def __init__(self, splits: CanarySplits, admin: CanaryAdmin) -> None:
        self.splits = splits
        self._admin = admin

    @classmethod
    def build(cls, core: Core) -> CanaryFeature:
        """Provides `CANARY` (the version splits the dispatcher follows after rollouts)."""
        settings, resources, tables = core.settings, core.resources, core.ports.require(TABLES)
        database = resources.databases.get(settings.database_url, settings.data_dir)
        splits = core.ports.provide(CANARY, CanarySplits(resources.shared, database))
        admin = CanaryAdmin(
            splits, lambda: tables.table, core.access, core.config.server.max_request_bytes
        )
        return cls(splits, admin)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def missing(self) -> list[str]:
        return [] if self.splits.loaded else ["database"]

    async def start(self) -> None:
        await self.splits.start()

    async def aclose(self) -> None:
        await self.splits.aclose()
