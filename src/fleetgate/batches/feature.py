"""`BatchesFeature`: the batch lane (the OpenAI Files and Batch APIs and their worker).

No stage of its own: each line of a batch is sent through the whole request path
(`fleetgate.batches.execute`). Files, batches and per-line results are in the database (the
one shared by every replica); the store is migrated on the first call that needs it. The
worker (every replica runs one; one drives each batch, by a lease) starts with the app when a
database is configured or the embedded one exists, else on the first call of the API. With
``batches.enabled: false`` it serves no routes and runs nothing.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web
from sqlalchemy.engine import make_url

from fleetgate.api.state import GATEWAY_STATE, GatewayState
from fleetgate.batches.config import BATCHES_SECTION, BatchesConfig
from fleetgate.batches.execute import GatewaySender
from fleetgate.batches.routes import BatchRoutes
from fleetgate.batches.store import BatchStore
from fleetgate.batches.worker import BatchWorker
from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.feature import BaseFeature
from fleetgate.http import AdminAccess
from fleetgate.scheduling.ports import SCHEDULER
from fleetgate.tenancy.ports import TENANCY

__all__ = ["BatchesFeature"]


class BatchesFeature(BaseFeature):
    name = "batches"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    sections = (BATCHES_SECTION,)

    def __init__(
        self,
        gw: GatewayState,
        access: AdminAccess,
        config: GatewayConfig,
        sender: GatewaySender,
    ) -> None:
        """``sender``: how lines run (through ``gw``'s request path)."""
        resources = gw.resources
        self._databases = resources.databases
        self.db = resources.databases.get(gw.settings.database_url, gw.settings.data_dir)
        self._shared = gw.settings.database_url is not None
        self.config: BatchesConfig = BATCHES_SECTION.of(config)
        self.max_request_bytes = config.server.max_request_bytes  # a line's limit too
        self.store = BatchStore(self.db)
        self.worker = BatchWorker(
            self.store,
            lambda: self.config,
            sender,
            owner=f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"[:64],
            prepare=self._migrate,
            max_line_bytes=lambda: self.max_request_bytes,
        )
        self.api = BatchRoutes(
            self.store, access, lambda: self.config, self._migrate,
            config.server.max_request_bytes, self.worker.nudge,
        )  # fmt: skip

    async def _migrate(self) -> None:
        await self._databases.migrate(self.db)
        if self.config.enabled:
            await self.worker.start()  # a batch may now exist (idempotent)

    @classmethod
    def build(cls, core: Core) -> BatchesFeature:
        """Built even when ``batches.enabled`` is false: a reload may turn it on (its routes
        are served only while it is on)."""
        gw = core.ports.require(GATEWAY_STATE)
        sender = GatewaySender(gw, core.ports.get(SCHEDULER), core.ports.get(TENANCY))
        return cls(gw, core.access, core.config, sender)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self.api.routes() if self.config.enabled else ()

    def reconfigure(self, config: GatewayConfig) -> None:
        # limits and pacing apply to the next tick and request
        self.config = BATCHES_SECTION.of(config)
        self.max_request_bytes = config.server.max_request_bytes

    async def start(self) -> None:
        """Start the worker when batches may exist: a configured (shared) database, or the
        embedded SQLite file already there; else on the first call of the API, so a gateway
        that never uses batches creates no database."""
        if self.config.enabled and (self._shared or _exists(self.db.url)):
            await self.worker.start()

    async def aclose(self) -> None:
        await self.worker.aclose()


def _exists(url: str) -> bool:
    """Whether the SQLite file of ``url`` exists (always True for a server database)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return True
    return bool(parsed.database) and Path(str(parsed.database)).exists()
