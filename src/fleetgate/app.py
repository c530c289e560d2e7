"""`create_app`: build every part from Settings and a config, start and stop them with the app.

Nothing happens at import time; each app owns its metrics registry, HTTP pool and tasks.

Example::

    settings = Settings(master_key="sk-master", config_path=Path("fleetgate.yaml"))
    app = create_app(settings)
    web.run_app(app, host=settings.host, port=settings.port, handler_cancellation=True)
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterable

from aiohttp import web

from fleetgate.api.admin_tenancy import TENANCY
from fleetgate.api.audio import add_multimodal
from fleetgate.api.errors import error_middleware
from fleetgate.api.routes import add_routes
from fleetgate.api.routing_extras import add_canary, add_semantic
from fleetgate.api.safety_wiring import add_safety
from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.config.loader import load_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError
from fleetgate.providers.http import HttpClient
from fleetgate.providers.registry import ProviderRegistry
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.engine_stats import EngineStats
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.kv_aware import EngineAwareRouting
from fleetgate.routing.load_share import RedisLoadShare
from fleetgate.routing.prefix_share import PrefixShare
from fleetgate.routing.reload import TableManager
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.routing.table import RouteTable
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.telemetry.workers import WorkerMetrics
from fleetgate.tenancy.auth import MasterKeyAuthenticator
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["create_app", "build_state"]


def _config(settings: Settings, config: GatewayConfig | None) -> GatewayConfig:
    if config is not None:
        return config
    if settings.config_path is None:
        raise ConfigError("no config: pass --config FILE or set FLEETGATE_CONFIG")
    return load_config(settings.config_path)


def build_state(
    settings: Settings,
    config: GatewayConfig | None = None,
    *,
    strategies: StrategyRegistry | None = None,
) -> GatewayState:
    """Build the gateway's parts (no I/O, no tasks started)."""
    cfg = _config(settings, config)
    http = HttpClient()
    providers = ProviderRegistry.with_builtins(http)
    metrics = GatewayMetrics()
    engine_aware = _engine_aware(settings, cfg, metrics, lambda: tables.table)
    tables = TableManager(
        cfg,
        providers.create,
        strategies or StrategyRegistry.with_builtins(engine_aware),
        path=settings.config_path if config is None else None,
    )
    health = HealthTracker(cfg.health, metrics, lambda: tables.table.deployments())
    dispatcher = Dispatcher(cfg.router, health, metrics, observer=engine_aware)

    def on_change(table: RouteTable) -> None:
        dispatcher.config = table.config.router
        health.config = table.config.health
        engine_aware.update_config(table.config.routing)

    tables.subscribe(on_change)

    def deployment_gauges() -> Iterable[tuple[tuple[str, str, str], int, bool]]:
        for d in tables.table.deployments():
            yield (d.alias, d.id, d.version), d.state.in_flight, d.state.healthy()

    metrics.bind_deployment_gauges(deployment_gauges)
    access_path = settings.data_dir / "access.log" if cfg.server.access_log else None
    return GatewayState(
        settings=settings,
        tables=tables,
        dispatcher=dispatcher,
        health=health,
        metrics=metrics,
        http=http,
        auth=MasterKeyAuthenticator(settings.master_key),
        access_log=AccessLog(access_path),
        tracer=GenAITracer(cfg.server.otel_exporter, cfg.server.otel_endpoint),
        max_request_bytes=cfg.server.max_request_bytes,
    )


def _engine_aware(
    settings: Settings,
    cfg: GatewayConfig,
    metrics: GatewayMetrics,
    table: Callable[[], RouteTable],
) -> EngineAwareRouting:
    """Engine stats (scraping the engines of kv-aware aliases), prefix index, decision log."""
    routing = cfg.routing

    def targets() -> Iterable[Deployment]:
        for alias in table().aliases():
            route = table().route(alias)
            if route.config.strategy == "kv-aware":
                yield from route.deployments

    share = None
    replica = os.urandom(6).hex()
    if routing.redis_url:
        share = RedisLoadShare.from_url(
            routing.redis_url, replica, ttl_s=max(2.0, 20 * routing.scrape_interval_s)
        )
    secret = (routing.salt_secret or settings.master_key or os.urandom(16).hex()).encode()
    stats = EngineStats(routing, targets, share=share)
    engine_aware = EngineAwareRouting(routing, stats, secret=secret, registry=metrics.registry)
    if routing.redis_url:  # replicas learn each other's prefix records
        engine_aware.prefix_share = PrefixShare.from_url(
            routing.redis_url, replica, engine_aware.index
        )
    return engine_aware


def _add_tenancy(app: web.Application, settings: Settings, gw: GatewayState) -> None:
    """Teams, keys, limits, spend and audit (``tenancy:`` in the config; on by default)."""
    cfg = gw.tables.table.config.tenancy
    if not cfg.enabled:
        return
    tenancy = Tenancy(settings, cfg, gw.metrics.registry)
    app[TENANCY] = tenancy
    gw.auth = MasterKeyAuthenticator(settings.master_key, next=tenancy.cache)
    gw.stages.insert(0, tenancy.stage)
    gw.tables.subscribe(lambda table: tenancy.reconfigure(table.config.tenancy))

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        await tenancy.start()
        yield
        await tenancy.stop()

    app.cleanup_ctx.append(lifespan)


def create_app(
    settings: Settings,
    config: GatewayConfig | None = None,
    *,
    state: GatewayState | None = None,
) -> web.Application:
    """The gateway as an aiohttp application; run it with ``handler_cancellation=True``."""
    gw = state or build_state(settings, config)
    app = web.Application(middlewares=[error_middleware], client_max_size=gw.max_request_bytes + 1)
    app[GATEWAY] = gw
    add_routes(app)
    _add_tenancy(app, settings, gw)
    add_multimodal(app)
    add_safety(app, settings, gw)  # after multimodal: checks see transcripts
    add_canary(app, settings, gw)
    add_semantic(app, settings, gw)

    if settings.workers > 1 and gw.worker_metrics is None:
        gw.worker_metrics = WorkerMetrics(gw.metrics.registry, settings.data_dir / "metrics")

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        gw.health.start()
        gw.access_log.start()
        if gw.worker_metrics is not None:
            gw.worker_metrics.start()
        engine_aware = gw.dispatcher.observer
        if isinstance(engine_aware, EngineAwareRouting):
            engine_aware.start()
        if settings.watch_config:
            gw.tables.start_watching()
        yield
        await gw.tables.stop()
        if isinstance(engine_aware, EngineAwareRouting):
            await engine_aware.stop()
        await gw.health.stop()
        await gw.access_log.stop()
        if gw.worker_metrics is not None:
            await gw.worker_metrics.stop()
        await gw.http.close()
        gw.tracer.shutdown()

    app.cleanup_ctx.append(lifespan)
    return app
