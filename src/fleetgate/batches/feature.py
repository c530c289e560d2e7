"""`BatchesFeature`: the batch lane (the OpenAI Files and Batch APIs and their worker).

No stage of its own: each line of a batch is sent through the whole request path
(`fleetgate.batches.execute`). Files, batches and per-line results are in the database (the
one shared by every replica); the store is migrated on the first call that needs it. The
worker (every replica runs one; one drives each batch, by a lease) starts with the app when a
database is configured or the embedded one exists, else on the first call of the API. With
``batches.enabled: false`` it is not built (`fleetgate.feature`: the switch-off rule); its API
paths answer the 404 that names the switch (`fleetgate.api.unsupported`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web
from sqlalchemy.engine import make_url

from fleetgate.api.path import REQUEST_PATH
from fleetgate.batches.config import BATCHES_SECTION, BatchesConfig
from fleetgate.batches.execute import GatewaySender
from fleetgate.batches.routes import BatchRoutes
from fleetgate.batches.store import BatchStore
from fleetgate.batches.worker import BatchWorker
from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import AdminAccess
from fleetgate.scheduling.ports import SCHEDULER
from fleetgate.tenancy.ports import TENANCY

__all__ = ["BatchesFeature"]


class BatchesFeature(BaseFeature):
    name = "batches"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    sections = (BATCHES_SECTION,)
    switch = Switch("batches")

    def __init__(
        self,
        core: Core,
        access: AdminAccess,
        config: GatewayConfig,
        sender: GatewaySender,
    ) -> None:
        """``sender``: how lines run (through the request path, `REQUEST_PATH`)."""
        settings, resources = core.settings, core.resources
        self._databases = resources.databases
        self.db = resources.databases.get(settings.database_url, settings.data_dir)
        self._shared = settings.database_url is not None
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
        """Lines run through `REQUEST_PATH`, wait for the `SCHEDULER`'s idle capacity (when
        scheduling is on) and run as the key `TENANCY` knows (when tenancy is on)."""
        ports = core.ports
        sender = GatewaySender(
            ports.require(REQUEST_PATH), ports.get(SCHEDULER), ports.get(TENANCY)
        )
        return cls(core, core.access, core.config, sender)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self.api.routes()

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
