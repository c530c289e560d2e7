"""`create_app`: build every part from Settings and a config, start and stop them with the app.

Nothing happens at import time; each app owns its metrics registry, HTTP pool and tasks.

Example::

    settings = Settings(master_key="sk-master", config_path=Path("fleetgate.yaml"))
    app = create_app(settings)
    web.run_app(app, host=settings.host, port=settings.port, handler_cancellation=True)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from aiohttp import web

from fleetgate.api.errors import error_middleware
from fleetgate.api.routes import add_routes
from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.config.loader import load_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError
from fleetgate.providers.http import HttpClient
from fleetgate.providers.registry import ProviderRegistry
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.reload import TableManager
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.routing.table import RouteTable
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.tenancy.auth import MasterKeyAuthenticator

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
    tables = TableManager(
        cfg,
        providers.create,
        strategies or StrategyRegistry.with_builtins(),
        path=settings.config_path if config is None else None,
    )
    health = HealthTracker(cfg.health, metrics, lambda: tables.table.deployments())
    dispatcher = Dispatcher(cfg.router, health, metrics)

    def on_change(table: RouteTable) -> None:
        dispatcher.config = table.config.router
        health.config = table.config.health

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

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        gw.health.start()
        gw.access_log.start()
        if settings.watch_config:
            gw.tables.start_watching()
        yield
        await gw.tables.stop()
        await gw.health.stop()
        await gw.access_log.stop()
        await gw.http.close()
        gw.tracer.shutdown()

    app.cleanup_ctx.append(lifespan)
    return app
