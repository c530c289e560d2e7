"""The gateway's core object: what the request path's handlers need, and every feature.

Built by `fleetgate.app.build_state` (core parts) and `fleetgate.app.create_app` (features),
stored on the app under `GATEWAY` (the only app key). Features reach each other through the
typed attributes below, set when they are built, never through app keys.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Authenticator, Principal
from fleetgate.contract.stages import Stage
from fleetgate.errors import ModelNotFound
from fleetgate.feature import Features
from fleetgate.http import AdminAccess
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.providers.transport import HttpClient
from fleetgate.resources import Resources
from fleetgate.routing.canary import CanarySplits
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.kv_aware import EngineAwareRouting
from fleetgate.routing.reload import TableManager
from fleetgate.routing.semantic_stage import SemanticStage
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.telemetry.workers import WorkerMetrics
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["GATEWAY", "GatewayState"]


@dataclass(eq=False)
class GatewayState:
    settings: Settings
    tables: TableManager
    dispatcher: Dispatcher
    health: HealthTracker
    metrics: GatewayMetrics
    http: HttpClient
    auth: Authenticator
    access_log: AccessLog
    tracer: GenAITracer
    max_request_bytes: int
    body_timeout_s: float = 30.0  # server.body_timeout_s: a body not in by then is a 408
    # The one owner of Redis connections, databases, side-service HTTP and MiniLM (closed last).
    resources: Resources = field(default_factory=Resources)
    engine_routing: EngineAwareRouting | None = None  # the dispatcher's observer
    # The request path's stages, in order: `features.stages()` (set by `create_app`).
    stages: list[Stage] = field(default_factory=list)
    features: Features = field(default_factory=lambda: Features(()))
    access: AdminAccess | None = None  # admin authentication and audit (set by `create_app`)
    tenancy: Tenancy | None = None  # None when off
    multimodal: MultimodalRuntime | None = None
    safety: SafetyRuntime | None = None
    semantic: SemanticStage | None = None
    canary: CanarySplits | None = None
    scheduler: Scheduler | None = None  # admission queues; None when scheduling is off
    # Aliases a stage resolves to a configured one (the semantic router's ``auto``).
    virtual_aliases: set[str] = field(default_factory=set)
    worker_metrics: WorkerMetrics | None = None  # set when serving with several workers
    request_ids: RequestIds = field(default_factory=lambda: RequestIds())

    def check_model(self, principal: Principal, model: str, *, routed: bool = True) -> None:
        """404 unless ``principal`` may use ``model`` and (``routed``) an alias serves it; 403
        for a role that may call no model (a finance viewer)."""
        if not principal.require("call").may_use(model):
            raise ModelNotFound(
                f"The model '{model}' does not exist or you do not have access to it.",
                param="model",
            )
        if routed and model not in self.virtual_aliases:
            self.tables.table.route(model)  # ModelNotFound for an unknown alias


class RequestIds:
    """Request ids no caller can guess from its own: the time in milliseconds (12 hex digits:
    ids sort by when they were issued) and 80 bits from the OS's CSPRNG (unique across
    replicas and restarts). They name answers to clients (``x-request-id``, feedback), so
    they must not be a counter a neighbour could step."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def next(self) -> str:
        return f"{int(self._clock() * 1000):012x}{secrets.token_hex(10)}"


GATEWAY = web.AppKey("fleetgate.gateway", GatewayState)
