"""`create_app`: build every part from Settings and a config, start and stop them with the app.

Nothing happens at import time; each app owns its metrics registry, HTTP pool and tasks.

Example::

    settings = Settings(master_key="sk-master", config_path=Path("fleetgate.yaml"))
    app = create_app(settings)
    web.run_app(app, host=settings.host, port=settings.port, handler_cancellation=True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from aiohttp import web

from fleetgate.api import unsupported
from fleetgate.api.errors import error_middleware
from fleetgate.api.feature import CoreFeature
from fleetgate.api.responses.feature import ResponsesFeature
from fleetgate.api.state import GATEWAY, GATEWAY_STATE, GatewayState
from fleetgate.batches.feature import BatchesFeature
from fleetgate.cache.feature import CacheFeature
from fleetgate.compat.litellm import LiteLLMFeature
from fleetgate.config.loader import load_config
from fleetgate.config.reload import ReloadRules
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import Declared, check_sections
from fleetgate.config.settings import Settings
from fleetgate.console import ConsoleFeature
from fleetgate.core import Core
from fleetgate.cost.feature import CostFeature
from fleetgate.disclosure.feature import DisclosureFeature
from fleetgate.errors import ConfigError
from fleetgate.feature import (
    BuildsFeature,
    Feature,
    Features,
    migration_folders,
    switched_off_routes,
)
from fleetgate.insights.feature import InsightsFeature
from fleetgate.limits.base import Limiter
from fleetgate.limits.redis import RedisLimiter
from fleetgate.mcp.feature import McpFeature
from fleetgate.multimodal.feature import MultimodalFeature
from fleetgate.providers.registry import ProviderRegistry
from fleetgate.providers.transport import HttpClient
from fleetgate.reclaim.feature import ReclaimFeature
from fleetgate.releases.feature import ReleasesFeature
from fleetgate.resources import Resources
from fleetgate.routing.canary_feature import CanaryFeature
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.encoder import EncoderStep
from fleetgate.routing.engine_routing_feature import EngineRoutingFeature, engine_routing
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.ports import DISPATCHER, ENGINE_ROUTING, TABLES, plug_dispatcher
from fleetgate.routing.reload import TableManager
from fleetgate.routing.semantic_feature import SemanticFeature
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.routing.wake_feature import WakeFeature
from fleetgate.safety.feature import SafetyFeature
from fleetgate.scheduling.feature import SchedulingFeature
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.telemetry.workers import WorkerMetrics
from fleetgate.tenancy.feature import TenancyFeature

__all__ = ["FEATURES", "MIGRATIONS", "SECTIONS", "build_features", "build_state", "create_app"]

FEATURES: tuple[BuildsFeature, ...] = (
    CoreFeature,  # routes, health, access log, config watch; closes the shared last
    SemanticFeature,  # `model: auto` -> an alias, before everything that depends on the alias
    DisclosureFeature,  # the alias's registered model name and filing number on every answer
    TenancyFeature,  # may this key use the alias, within limits; settles and bills after
    MultimodalFeature,  # images, audio, prompt assembly (checks below see transcripts)
    SafetyFeature,  # input, output and stream guardrails
    CacheFeature,  # answers from response caches
    SchedulingFeature,  # admission into the alias's pool, last: only the engine is left after it
    CanaryFeature,  # version splits the dispatcher follows
    EngineRoutingFeature,  # engine stats, prefix index, decision log
    WakeFeature,  # holds requests for pools scaled to zero or asleep; puts idle engines to sleep
    ReclaimFeature,  # pools under reclaim.below_util_pct for the window: asleep or scaled to zero
    ReleasesFeature,  # model registry: aliases that follow a stage, evaluations, gates
    CostFeature,  # GPU cost (the `cost:` section)
    InsightsFeature,  # end users, sessions and plans per request; business metrics, key report
    BatchesFeature,  # Files + Batch APIs; lines run the path above
    ResponsesFeature,  # /v1/responses: bridged to the chat path, stored per tenant
    ConsoleFeature,  # the web console at /ui and sign-in
    LiteLLMFeature,  # LiteLLM clients: root paths, its key headers, /key/info, /spend/logs
    McpFeature,  # the MCP gateway, when `mcp.servers` is set: tools behind the same keys and checks
)
"""The built-in features. **The order of this tuple is the order of the request path**: stages
run ``before`` in this order and ``after`` in reverse; features are built and started in this
order (a port is provided before a later feature asks for it) and close in reverse."""

SECTIONS: tuple[Declared, ...] = tuple(d for cls in FEATURES for d in cls.sections)
"""The built-in features' config sections (each declared by its feature class): validated when
the config is loaded or reloaded; a top-level key none of them (nor the ground floor) names is
refused. Plug-in features read ``extensions.<name>``; a built-in section written there (the old
form) is still read, with a deprecation line."""

MIGRATIONS = migration_folders(FEATURES)
"""The built-in features' Alembic revision folders (each declared by its feature class, on or
off): every database the gateway, the CLI and the importers open is migrated with them."""


def _config(settings: Settings, config: GatewayConfig | None) -> GatewayConfig:
    if config is not None:
        check_sections(config, SECTIONS)
        return config
    if settings.config_path is None:
        raise ConfigError("no config: pass --config FILE or set FLEETGATE_CONFIG")
    return load_config(settings.config_path, sections=SECTIONS)


def build_state(
    settings: Settings,
    config: GatewayConfig | None = None,
    *,
    strategies: StrategyRegistry | None = None,
) -> GatewayState:
    """Build the gateway's core parts (no I/O, no tasks started) and provide their ports."""
    cfg = _config(settings, config)
    resources = Resources(migrations=MIGRATIONS)  # the shared owner
    core = Core(settings, cfg, resources, GatewayMetrics())
    metrics = core.metrics
    http = HttpClient()  # the upstream providers' data-path pool
    providers = ProviderRegistry.with_builtins(http)
    engine_aware = engine_routing(
        settings, cfg.routing, metrics.registry, lambda: tables.table, resources
    )
    tables = TableManager(
        cfg,
        providers.create,
        strategies or StrategyRegistry.with_builtins(engine_aware),
        path=settings.config_path if config is None else None,
        reload_rules=ReloadRules.of(SECTIONS),
    )
    tables.on_reload = lambda source, result: metrics.config_reloads.labels(result, source).inc()
    health = HealthTracker(cfg.health, metrics, lambda: tables.table.deployments())
    dispatcher = Dispatcher(cfg.router, health, metrics, observer=engine_aware)
    dispatcher.salt = engine_aware.tenant_salt
    dispatcher.encoder = EncoderStep(resources.http, metrics.registry)  # encoder pools

    def deployment_gauges() -> Iterable[tuple[tuple[str, str, str], int, bool]]:
        for d in tables.table.deployments():
            yield (d.alias, d.id, d.version), d.state.in_flight, d.state.healthy()

    metrics.bind_deployment_gauges(deployment_gauges)
    access_path = settings.data_dir / "access.log" if cfg.server.access_log else None
    gw = GatewayState(
        core=core,
        tables=tables,
        dispatcher=dispatcher,
        health=health,
        http=http,
        access_log=AccessLog(
            access_path,
            max_bytes=cfg.server.access_log_max_bytes,
            max_age_s=cfg.server.access_log_max_age_s,
            backups=cfg.server.access_log_backups,
        ),
        tracer=GenAITracer(cfg.server.otel_exporter, cfg.server.otel_endpoint),
        max_request_bytes=cfg.server.max_request_bytes,
        body_timeout_s=cfg.server.body_timeout_s,
    )
    core.ports.provide(GATEWAY_STATE, gw)
    core.ports.provide(TABLES, tables)
    core.ports.provide(DISPATCHER, dispatcher)
    if engine_aware is not None:
        core.ports.provide(ENGINE_ROUTING, engine_aware)
    return gw


def build_features(core: Core, extra: Sequence[Feature] = ()) -> tuple[Feature, ...]:
    """Build every feature of `FEATURES` in order whose switch is on (``cls.build(core)``;
    None: it cannot run), then let the dispatcher read its ports. ``extra`` (plug-ins, tests)
    comes after the built-in ones, except that one named like a built-in feature takes its
    place."""
    built = tuple(
        f
        for f in (
            cls.build(core) for cls in FEATURES if cls.switch is None or cls.switch.on(core.config)
        )
        if f is not None
    )
    plug_dispatcher(core.ports, _shared_limiter(core))
    return _with_extra(built, extra)


def _shared_limiter(core: Core) -> Limiter | None:
    """The fleet's Redis limiter for deployments' rpm / tpm when tenancy (whose limiter they
    use when it is on) is off; None without Redis (in process)."""
    tenancy = core.config.tenancy
    if tenancy.enabled or not core.settings.redis_url:
        return None
    return RedisLimiter(
        core.resources.redis.commands(core.settings.redis_url),
        prefix=tenancy.redis_prefix,
        policy=tenancy.limiter_failure,
    )


def switched_off(config: GatewayConfig) -> tuple[BuildsFeature, ...]:
    """The features of `FEATURES` that ``config`` switches off (the one rule:
    `fleetgate.feature.Switch`)."""
    return tuple(cls for cls in FEATURES if cls.switch is not None and not cls.switch.on(config))


def _with_extra(features: tuple[Feature, ...], extra: Sequence[Feature]) -> tuple[Feature, ...]:
    """An extra feature replaces the built-in one of its name in place; others come last."""
    by_name = {f.name: f for f in extra}
    replaced = tuple(by_name.pop(f.name, f) for f in features)
    return (*replaced, *(f for f in extra if f.name in by_name))


def _known_extensions(names: Sequence[str]) -> Callable[[GatewayConfig], None]:
    """A check that each ``extensions:`` section names one of the features ``names`` (or a
    built-in feature's section in its old place, read with a deprecation line)."""
    names = [*names, *(cls.name for cls in FEATURES), *(d.name for d in SECTIONS)]

    def check(config: GatewayConfig) -> None:
        unknown = sorted(set(config.extensions) - set(names))
        if unknown:
            raise ConfigError(f"extensions: no feature named {', '.join(unknown)}")

    return check


def create_app(
    settings: Settings,
    config: GatewayConfig | None = None,
    *,
    state: GatewayState | None = None,
    extra: Sequence[Feature] = (),
) -> web.Application:
    """The gateway as an aiohttp application; run it with ``handler_cancellation=True``."""
    gw = state or build_state(settings, config)
    gw.features = features = Features(build_features(gw.core, extra))
    _known_extensions(features.names())(gw.tables.table.config)
    gw.tables.add_check(_known_extensions(features.names()))  # a reload naming none: refused
    gw.tables.add_check(lambda new: check_sections(new, SECTIONS))  # a bad section: refused
    gw.stages = features.stages()
    app = web.Application(
        middlewares=[error_middleware],
        client_max_size=gw.max_request_bytes + 1,
    )
    app[GATEWAY] = gw
    app.router.add_routes(features.routes())
    for cls in switched_off(gw.core.config):  # its admin routes say so, naming the switch
        if cls.name not in features.names():  # unless an extra feature of its name serves
            app.router.add_routes(switched_off_routes(cls, gw.core.access))
    app.router.add_routes([unsupported.route()])  # last: OpenAI APIs no route above serves
    gw.tables.subscribe(lambda table: features.reconfigure(table.config))
    if settings.workers > 1 and gw.worker_metrics is None:
        gw.worker_metrics = WorkerMetrics(gw.metrics.registry, settings.data_dir / "metrics")
    app.cleanup_ctx.append(features.lifespan)
    return app
