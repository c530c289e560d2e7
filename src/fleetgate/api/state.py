"""The request path's state: the routing core, telemetry and `Core` (ports included).

Built by `fleetgate.app.build_state`, stored on the app under `GATEWAY` (the only app key).
It holds no feature: the request path's handlers take what features provide from the ports
they read when the app is built (`fleetgate.core`), never from a slot here. Only the core
feature (``api/``) reads it; other features ask for what they use of the path as the typed
port `fleetgate.api.path.REQUEST_PATH` (``tests/test_features.py`` keeps it so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from fleetgate.config.settings import Settings
from fleetgate.contract.principal import Principal
from fleetgate.contract.stages import Stage
from fleetgate.core import Core, Port
from fleetgate.errors import ModelNotFound
from fleetgate.feature import Features
from fleetgate.providers.transport import HttpClient
from fleetgate.resources import Resources
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.reload import TableManager
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.telemetry.workers import WorkerMetrics

__all__ = ["GATEWAY", "GATEWAY_STATE", "GatewayState"]


@dataclass(eq=False)
class GatewayState:
    core: Core  # settings, resources, metrics, the authenticator chain, admin access, ports
    tables: TableManager
    dispatcher: Dispatcher
    health: HealthTracker
    http: HttpClient
    access_log: AccessLog
    tracer: GenAITracer
    max_request_bytes: int
    body_timeout_s: float = 30.0  # server.body_timeout_s: a body not in by then is a 408
    # The request path's stages, in order: `features.stages()` (set by `create_app`).
    stages: list[Stage] = field(default_factory=list)
    features: Features = field(default_factory=lambda: Features(()))
    worker_metrics: WorkerMetrics | None = None  # set when serving with several workers

    @property
    def settings(self) -> Settings:
        return self.core.settings

    @property
    def metrics(self) -> GatewayMetrics:
        return self.core.metrics

    @property
    def resources(self) -> Resources:
        return self.core.resources

    def check_model(self, principal: Principal, model: str, *, routed: bool = True) -> None:
        """404 unless ``principal`` may use ``model`` and (``routed``) an alias serves it; 403
        for a role that may call no model (a finance viewer)."""
        if not principal.require("call").may_use(model):
            raise ModelNotFound(
                f"The model '{model}' does not exist or you do not have access to it.",
                param="model",
            )
        if routed and model not in self.core.virtual_aliases:
            self.tables.table.route(model)  # ModelNotFound for an unknown alias


GATEWAY = web.AppKey("fleetgate.gateway", GatewayState)

GATEWAY_STATE: Port[GatewayState] = Port("gateway-state")
"""The request path's state, for the core feature only (others: `REQUEST_PATH`)."""
