"""The ``engine-routing`` feature: engine-aware routing's background work and routes (always on).

`engine_routing` builds, with the core (the strategies and the dispatcher need it), the engine
stats that scrape the engines of engine-aware aliases, the prefix index and its sharing between
replicas, and the decision log. `EngineRoutingFeature` runs their background work, follows the
engines' KV events, learns which engines take ``cache_salt``, and serves the ``/admin/routing``
routes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable

import aiohttp
from aiohttp import web

from fleetgate.config.schema import GatewayConfig, RoutingConfig
from fleetgate.config.settings import Settings
from fleetgate.core import Core
from fleetgate.feature import BaseFeature
from fleetgate.http import AdminAccess
from fleetgate.resources import Resources
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.admin_routes import EngineRoutingAdmin
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.engine_stats import EngineStats, engine_key
from fleetgate.routing.load_share import RedisLoadShare
from fleetgate.routing.ports import ENGINE_ROUTING, TABLES
from fleetgate.routing.prefix_share import PrefixShare
from fleetgate.routing.salt import TenantSalt, engine_of_models
from fleetgate.routing.table import RouteTable
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry

# Strategies that read engine stats and KV events (their engines are scraped and subscribed).
ENGINE_AWARE = ("kv-aware", "pd-disagg")

__all__ = ["EngineRoutingFeature", "engine_routing"]


class EngineRoutingFeature(BaseFeature):
    """``routing`` is None when the dispatcher was built without an engine-aware observer."""

    name = "engine-routing"

    def __init__(
        self,
        routing: EngineAwareRouting | None,
        table: Callable[[], RouteTable],
        access: AdminAccess,
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session, for asking engines what they are (the
        resource owner closes it)."""
        self.routing = routing
        self._table = table
        self._http = http
        self._identifying: asyncio.Task[None] | None = None
        self._admin = EngineRoutingAdmin(routing, table, access)

    @classmethod
    def build(cls, core: Core) -> EngineRoutingFeature:
        """Over `ENGINE_ROUTING` (None: the admin routes say it is off)."""
        tables = core.ports.require(TABLES)
        return cls(
            core.ports.get(ENGINE_ROUTING),
            lambda: tables.table,
            core.access,
            http=core.resources.http,
        )

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._admin.routes()

    def reconfigure(self, config: GatewayConfig) -> None:
        if self.routing is not None:
            self.routing.update_config(config.routing)
            self._identify()
            self._subscribe()

    async def start(self) -> None:
        if self.routing is not None:
            await self.routing.start()
            self._identify()
            self._subscribe()

    async def aclose(self) -> None:
        await cancel_and_wait(self._identifying)
        if self.routing is not None:
            await self.routing.aclose()

    def _subscribe(self) -> None:
        """Follow the KV events of the engines of kv-aware aliases that publish them."""
        if self.routing is None:
            return
        table = self._table()
        targets = {
            engine_key(d): d.config.kv_events
            for alias in table.aliases()
            if table.route(alias).config.strategy in ENGINE_AWARE
            for d in table.route(alias).deployments
            if d.config.kv_events is not None
        }
        self.routing.kv_subscribers.sync(targets)

    def _identify(self) -> None:
        """Learn in the background which engines take ``cache_salt`` (their ``/models``)."""
        if self.routing is None or self.routing.config.cache_salt != "auto":
            return
        salt = self.routing.tenant_salt
        unknown = {
            d.config.api_base: d
            for d in self._table().deployments()
            if d.config.provider == "openai"
            and d.config.engine == "auto"
            and d.config.api_base not in salt.kinds
        }
        if unknown and (self._identifying is None or self._identifying.done()):
            self._identifying = asyncio.get_running_loop().create_task(
                _identify(salt, list(unknown.values()), self._http), name="fg-engine-kinds"
            )


def engine_routing(
    settings: Settings,
    routing: RoutingConfig,
    registry: Registry,
    table: Callable[[], RouteTable],
    resources: Resources,
) -> EngineAwareRouting:
    """Engine stats (scraping the engines of kv-aware aliases), prefix index, decision log.

    Built with the core (the strategies and the dispatcher need it); `EngineRoutingFeature`
    runs its background work and serves its routes.
    """

    def targets() -> Iterable[Deployment]:
        for alias in table().aliases():
            route = table().route(alias)
            if route.config.strategy in ENGINE_AWARE:
                yield from route.deployments

    share = None
    replica = os.urandom(6).hex()
    if routing.redis_url:
        share = RedisLoadShare(
            resources.redis.client(routing.redis_url),
            replica,
            ttl_s=max(2.0, 20 * routing.scrape_interval_s),
        )
    secret = (routing.salt_secret or settings.master_key or os.urandom(16).hex()).encode()
    stats = EngineStats(routing, targets, share=share, http=resources.http)
    engine_aware = EngineAwareRouting(
        routing, stats, secret=secret, registry=registry, http=resources.http
    )
    if routing.redis_url:  # replicas learn each other's prefix records
        engine_aware.prefix_share = PrefixShare(
            resources.redis.client(routing.redis_url), replica, engine_aware.index
        )
    return engine_aware


async def _identify(salt: TenantSalt, deployments: list[Deployment], http: OutboundHttp) -> None:
    timeout = aiohttp.ClientTimeout(total=3.0)

    async def one(dep: Deployment) -> tuple[str, str]:
        cfg = dep.config
        headers = dict(cfg.extra_headers)
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        url = f"{cfg.api_base}/models"
        try:
            async with http.session().get(url, headers=headers, timeout=timeout) as resp:
                answer = await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return cfg.api_base, ""  # unknown: asked again at the next reload
        return cfg.api_base, engine_of_models(answer)

    found = await asyncio.gather(*(one(d) for d in deployments))
    salt.remember((base, kind) for base, kind in found if kind)
