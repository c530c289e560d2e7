"""`ReclaimFeature`: idle GPU pools put to sleep or scaled to zero, not only reported.

On when the config has a ``reclaim:`` section (`fleetgate.reclaim.config`). Its stage notes
which alias each request asks for (the guard's traffic); its two loops sample the pools and
follow wake-ups (`fleetgate.reclaim.reclaimer`); ``GET /admin/reclaim`` (master key) shows the
pools, their utilisation, what the acting replica would decide and the recent decisions.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from typing import Any

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import AdminAccess, json_reply
from fleetgate.reclaim.config import RECLAIM_SECTION
from fleetgate.reclaim.lease import DatabaseLease
from fleetgate.reclaim.metrics import ReclaimMetrics
from fleetgate.reclaim.probe import PoolProbe
from fleetgate.reclaim.reclaimer import Reclaimer
from fleetgate.resources.shared import SharedStates
from fleetgate.routing.ports import TABLES
from fleetgate.routing.reload import TableManager
from fleetgate.tasks import periodic

__all__ = ["ReclaimFeature"]

log = logging.getLogger("fleetgate.reclaim")

NAME = "reclaim"
ACTOR = Principal(key_id="reclaim", role="master")
_WATCH_S = 0.25  # how soon a wake-up here reaches the other replicas (plus their poll)


class _TrafficStage:
    """Notes the alias of every request that reaches the upstream call (the guard's traffic);
    an alias the table does not know is never recorded (no growth from made-up names)."""

    name = NAME

    def __init__(self, reclaimer: Reclaimer, tables: TableManager) -> None:
        self._reclaimer = reclaimer
        self._tables = tables
        self._table: object = None
        self._known: frozenset[str] = frozenset()

    async def before(self, req: GatewayRequest) -> None:
        table = self._tables.table
        if table is not self._table:
            self._table, self._known = table, frozenset(table.aliases())
        if req.alias in self._known:
            self._reclaimer.seen(req.alias)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        return None


class ReclaimFeature(BaseFeature):
    """The reclaimer, its stage, its loops and its admin route."""

    name = NAME
    sections = (RECLAIM_SECTION,)
    switch = Switch(NAME, opt_in=True)
    admin_routes = (("GET", "/admin/reclaim"),)

    def __init__(self, reclaimer: Reclaimer, access: AdminAccess, shared: SharedStates) -> None:
        self.reclaimer = reclaimer
        self.access = access
        self.shared = shared
        self.stage = _TrafficStage(reclaimer, reclaimer.tables)
        self._sampling = periodic(
            lambda: reclaimer.config.sample_interval_s,
            reclaimer.sample_once,
            log,
            "reclaim sample failed",
        )
        self._watching = periodic(
            lambda: _WATCH_S, reclaimer.watch_once, log, "reclaim watch failed"
        )

    @classmethod
    def build(cls, core: Core) -> ReclaimFeature | None:
        config = RECLAIM_SECTION.of(core.config)
        if config is None:
            return None
        settings, resources = core.settings, core.resources
        db = resources.databases.get(settings.database_url, settings.data_dir)
        owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        access = core.access

        async def audit(action: str, pool: str, detail: dict[str, Any]) -> None:
            try:
                await access.record(ACTOR, f"reclaim.{action}", pool, detail)
            except Exception as exc:  # the decision stands; the log line says what was lost
                log.warning("reclaim audit of %s %s not written: %s", action, pool, exc)

        reclaimer = Reclaimer(
            config,
            core.ports.require(TABLES),
            PoolProbe(resources.http),
            ReclaimMetrics(core.metrics.registry),
            DatabaseLease(db, "reclaim_lease", owner=owner, ttl_s=config.lease_s),
            resources.shared.state(db, "reclaim_pools"),
            resources.shared.state(db, "reclaim_activity"),
            audit,
        )

        def gauge(i: int) -> Any:
            return lambda: reclaimer.gauges()[i]

        reclaimer.metrics.bind(gauge(0), gauge(1), gauge(2))
        return cls(reclaimer, access, resources.shared)

    def reconfigure(self, config: GatewayConfig) -> None:
        new = RECLAIM_SECTION.of(config)
        if new is not None:  # removing the section takes a restart (presence_restart)
            self.reclaimer.configure(new)
            self.reclaimer.lease.ttl_s = new.lease_s

    async def start(self) -> None:
        r = self.reclaimer
        await self.shared.follow(r.pools_state, r.apply_pools)
        await self.shared.follow(r.activity, r.apply_activity)
        self._watching.start()
        self._sampling.start()

    async def aclose(self) -> None:
        await self._sampling.aclose()
        await self._watching.aclose()
        await self.reclaimer.lease.release()
        try:
            await self.reclaimer.forget_self()
        except Exception as exc:  # the database away: the acting replica prunes it later
            log.debug("reclaim: own traffic row left behind: %s", exc)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/admin/reclaim", self.get_reclaim)]

    async def get_reclaim(self, request: web.Request) -> web.Response:
        """``GET /admin/reclaim``: the pools, what would be decided now, recent decisions."""
        self.access.master(request)
        return json_reply(self.reclaimer.view())
