"""`ResponsesFeature`: the Responses API (``/v1/responses``) and its stored responses.

No stage of its own: a Responses request runs the chat request path (`handlers`). Stored
responses are in the database every replica shares (``fg_responses``), migrated on first use,
so a gateway that never serves the Responses API creates no database; from then on the feature
deletes expired responses every ``responses.purge_interval_s`` (each replica does; deleting is
idempotent). With ``responses.enabled: false`` it is not built (`fleetgate.feature`: the
switch-off rule); its paths answer the 404 that names the switch (`fleetgate.api.unsupported`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web

from fleetgate.api.path import REQUEST_PATH, RequestPath
from fleetgate.api.responses.config import RESPONSES_SECTION, ResponsesConfig
from fleetgate.api.responses.handlers import ResponsesRoutes
from fleetgate.api.responses.store import ResponseStore
from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.tasks import Background

__all__ = ["ResponsesFeature"]

log = logging.getLogger("fleetgate.responses")


class ResponsesFeature(BaseFeature):
    name = "responses"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    sections = (RESPONSES_SECTION,)
    switch = Switch("responses")

    def __init__(self, core: Core, path: RequestPath) -> None:
        """``path``: the request path a Responses request runs (`REQUEST_PATH`)."""
        settings = core.settings
        self._databases = core.resources.databases
        self.db = self._databases.get(settings.database_url, settings.data_dir)
        self.config: ResponsesConfig = RESPONSES_SECTION.of(core.config)
        self.store = ResponseStore(self.db)
        self.api = ResponsesRoutes(self.store, lambda: self.config, self._prepare, path)
        self._purger = Background(self._purge_loop, name="responses-purge")
        self._closed = False  # never started again once closed

    @classmethod
    def build(cls, core: Core) -> ResponsesFeature:
        return cls(core, core.ports.require(REQUEST_PATH))

    async def _prepare(self) -> None:
        await self._databases.migrate(self.db)
        if not self._closed:
            self._purger.start()  # on first use (once)

    async def _purge_loop(self) -> None:
        while True:
            try:
                gone = await self.store.purge()
                if gone:
                    log.info("deleted %d expired responses", gone)
            except Exception as exc:  # the database is away: try again next interval
                log.warning("could not delete expired responses: %r", exc)
            await asyncio.sleep(self.config.purge_interval_s)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self.api.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        self.config = RESPONSES_SECTION.of(config)

    async def aclose(self) -> None:
        self._closed = True
        await self._purger.aclose()
