"""`ReleasesFeature`: the registry, its admin API, and the replicas following its stages.

Aliases that follow a registry stage are rewritten in the route table
(`fleetgate.releases.follow`) and the request path reads the table as always. When some alias
follows the registry at start, the feature has one stage
(`fleetgate.releases.outcomes.ReleasesStage`): nothing before the upstream call; after it, the
outcome is counted in memory when the alias is under a rollout or follows the registry (a set
lookup otherwise); a background task writes the counts. The database is
opened (and migrated) when the first admin call needs it or, at start, when some alias follows
a registry stage; a gateway that uses neither never touches it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.core import Core, Port
from fleetgate.feature import BaseFeature
from fleetgate.http import AdminAccess
from fleetgate.releases.admin_routes import RegistryAdmin
from fleetgate.releases.alerts import RolloutAlerts
from fleetgate.releases.config import RELEASES_SECTION, ReleasesConfig
from fleetgate.releases.driver import RolloutDriver
from fleetgate.releases.evalstore import EvalStore
from fleetgate.releases.feedback import FeedbackStore
from fleetgate.releases.feedback_routes import FeedbackRoutes
from fleetgate.releases.follow import RegistryFollower, RolloutPicker
from fleetgate.releases.launchers import KubeLauncher, Launcher, LocalLauncher
from fleetgate.releases.outcomes import OutcomeBook, ReleasesStage
from fleetgate.releases.pipeline import PipelineDeps, ReleasePipeline
from fleetgate.releases.pipeline_config import PIPELINES_SECTION, PipelinesConfig
from fleetgate.releases.pipeline_driver import PipelineDriver
from fleetgate.releases.pipeline_routes import PipelineAdmin
from fleetgate.releases.pipeline_store import PipelineStore
from fleetgate.releases.registry import Registry
from fleetgate.releases.rollout_routes import RolloutAdmin
from fleetgate.releases.rollouts import RolloutStore
from fleetgate.resources import Resources
from fleetgate.routing.dispatch import VersionPicker
from fleetgate.routing.ports import CANARY, TABLES, VERSION_PICKER
from fleetgate.routing.reload import TableManager
from fleetgate.store.database import Database
from fleetgate.tasks import cancel_and_wait

__all__ = ["RELEASES", "ReleasesFeature"]

log = logging.getLogger("fleetgate.releases")


RELEASES: Port[ReleasesFeature] = Port("releases")
"""The registry and its rollouts (the console's registry and model pages)."""


class ReleasesFeature(BaseFeature):
    name = "releases"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    sections = (RELEASES_SECTION, PIPELINES_SECTION)

    def __init__(
        self,
        db: Database,
        resources: Resources,
        tables: TableManager,
        access: AdminAccess,
        config: GatewayConfig,
        settings: Settings | None = None,
    ) -> None:
        self.db = db
        self.settings = settings or Settings()
        self._resources = resources
        self.config: ReleasesConfig = RELEASES_SECTION.of(config)
        self.registry = Registry(db, retention=self.config.retention)
        self.evals = EvalStore(db)
        self.rollouts = RolloutStore(db)
        self.follower = RegistryFollower(
            self.registry,
            tables,
            poll_interval_s=self.config.poll_interval_s,
            version_aliases=self.config.version_aliases,
            rollouts=self.rollouts,
        )
        self.admin = RegistryAdmin(
            self.registry,
            self.evals,
            access,
            lambda: self.config,
            self.follower.changed,
            config.server.max_request_bytes,
            prepare=self._migrate,
        )
        self.feedback = FeedbackRoutes(
            FeedbackStore(db),
            access,
            self._migrate,
            config.server.max_request_bytes,
            lambda: self.config.rollout.regeneration_window_s,
        )
        self.alerts = RolloutAlerts(access, resources.http, lambda: self.config.rollout)
        self.driver = RolloutDriver(
            self.rollouts,
            self.registry,
            lambda: self.config.rollout,
            owner=f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}",
            notify=self.alerts,
            changed=self.follower.changed,
        )
        self.rollout_admin = RolloutAdmin(
            self.rollouts,
            self.admin,
            access,
            lambda: tables.source,
            self.follower.changed,
            self._migrate,
            config.server.max_request_bytes,
        )
        self.pipelines_config: PipelinesConfig = PIPELINES_SECTION.of(config)
        self.pipelines = PipelineStore(db)
        self.pipeline_driver = PipelineDriver(
            ReleasePipeline(self._pipeline_deps(), self.driver.owner),
            lambda: self.pipelines_config,
        )
        self.pipeline_admin = PipelineAdmin(
            self.pipelines,
            self.registry,
            access,
            lambda: self.pipelines_config,
            self._migrate,
            config.server.max_request_bytes,
        )
        self.book = OutcomeBook(
            db,
            replica=self.driver.owner,
            tracked=lambda alias: alias in self.follower.rollouts,
            recorded=self._recorded,
            flush_s=self.config.rollout.flush_s,
        )
        self.book.retention_s = self.config.requests_retention_s
        self._recording = _recorded_aliases(config)
        self.following = _follows(config)
        # Like every feature that is off, no stage without an alias that follows the registry
        # (rollouts and request rows only concern those aliases).
        self.stage = ReleasesStage(self.book) if self.following else None
        self.ready = False
        self._connecting: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, core: Core) -> ReleasesFeature:
        """Provides `VERSION_PICKER` (rollouts, then the `CANARY` splits) and `RELEASES`."""
        settings, resources = core.settings, core.resources
        db = resources.databases.get(settings.database_url, settings.data_dir)
        feature = cls(db, resources, core.ports.require(TABLES), core.access, core.config, settings)
        core.ports.provide(VERSION_PICKER, feature.picker(core.ports.get(CANARY)))
        core.ports.provide(RELEASES, feature)
        return feature

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [
            *self.admin.routes(),
            *self.rollout_admin.routes(),
            *self.feedback.routes(),
            *self.pipeline_admin.routes(),
        ]

    def _pipeline_deps(self) -> PipelineDeps:
        return PipelineDeps(
            store=self.pipelines,
            registry=self.registry,
            evals=self.evals,
            rollouts=self.rollouts,
            launcher=self._launcher(),
            gate=self.admin.gate,
            access=self.admin.access,
            gateway_url=self._gateway_url,
            master_key=lambda: self.settings.master_key,
            changed=self.follower.changed,
            now_ms=self.rollouts.clock,
        )

    def _launcher(self) -> Launcher:
        """The launcher the config names (fixed at start)."""
        cfg = self.pipelines_config
        if cfg.launcher == "kubernetes":
            return KubeLauncher(
                Path(cfg.kube_base_dir),
                namespace=cfg.kube_namespace,
                fleetgate_image=cfg.fleetgate_image,
                start_timeout_s=cfg.start_timeout_s,
            )
        log_dir = Path(cfg.log_dir) if cfg.log_dir else self.settings.data_dir / "engines"
        return LocalLauncher(log_dir, start_timeout_s=cfg.start_timeout_s)

    def _gateway_url(self) -> str:
        url = self.pipelines_config.gateway_url
        return url or f"http://{self.settings.host}:{self.settings.port}"

    def picker(self, then: VersionPicker | None) -> RolloutPicker:
        """The dispatcher's version picker: rollouts first, then ``then`` (canary splits)."""
        return RolloutPicker(self.follower, then)

    def _recorded(self, alias: str) -> bool:
        return alias in self._recording

    def reconfigure(self, config: GatewayConfig) -> None:
        self.config = RELEASES_SECTION.of(config)
        self.pipelines_config = PIPELINES_SECTION.of(config)
        self._recording = _recorded_aliases(config)
        self.book.flush_s = self.config.rollout.flush_s
        self.book.retention_s = self.config.requests_retention_s
        if _follows(config) and not self.following:
            self.following = True
            log.warning(
                "an alias follows the registry since this reload: its rollouts are judged "
                "and its requests recorded from the next restart (the request path's stages "
                "are fixed at start)"
            )
            asyncio.get_running_loop().call_soon(self._begin)
        self.registry.retention = self.config.retention
        self.follower.poll_interval_s = self.config.poll_interval_s
        if self.follower.version_aliases != self.config.version_aliases:
            self.follower.version_aliases = self.config.version_aliases
            asyncio.get_running_loop().call_soon(self.follower.tables.refresh)

    def missing(self) -> list[str]:
        return ["database"] if self.following and not self.ready else []

    async def _migrate(self) -> None:
        await self._resources.databases.migrate(self.db)

    def _begin(self) -> None:
        if self._connecting is None and not self.ready:
            self._connecting = asyncio.get_running_loop().create_task(self._keep_connecting())

    async def start(self) -> None:
        if not self.following:
            return
        try:
            await asyncio.wait_for(self._connect(), timeout=10.0)
        except Exception as exc:  # serve the config's deployments; keep trying in background
            log.warning("registry not reachable yet (%s); retrying in the background", exc)
            self._begin()
        else:
            await self.follower.start()
            await self.book.start()
            await self.driver.start()
            await self.pipeline_driver.start()

    async def _connect(self) -> None:
        await self._migrate()
        await self.follower.load()
        self.ready = True

    async def _keep_connecting(self) -> None:
        while not self.ready:
            try:
                await self._connect()
            except Exception as exc:
                log.debug("registry still not reachable: %s", exc)
                await asyncio.sleep(1.0)
        await self.follower.start()
        await self.book.start()
        await self.driver.start()
        await self.pipeline_driver.start()

    async def aclose(self) -> None:
        await cancel_and_wait(self._connecting)
        await self.pipeline_driver.aclose()
        await self.driver.aclose()
        await self.book.aclose()
        await self.follower.aclose()


def _follows(config: GatewayConfig) -> bool:
    return any(m.registry is not None for m in config.models)


def _recorded_aliases(config: GatewayConfig) -> frozenset[str]:
    """The aliases with a row per request: those that follow the registry."""
    if not RELEASES_SECTION.of(config).record_requests:
        return frozenset()
    return frozenset(m.alias for m in config.models if m.registry is not None)
