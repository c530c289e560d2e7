"""What the handlers need, built by `create_app` and stored on the app under `GATEWAY`."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from aiohttp import web

from fleetgate.config.settings import Settings
from fleetgate.errors import ModelNotFound
from fleetgate.hooks import Stage
from fleetgate.providers.http import HttpClient
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.reload import TableManager
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.telemetry.workers import WorkerMetrics
from fleetgate.tenancy.auth import Authenticator
from fleetgate.tenancy.principal import Principal

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
    stages: list[Stage] = field(default_factory=list)
    # Aliases a stage resolves to a configured one (the semantic router's ``auto``).
    virtual_aliases: set[str] = field(default_factory=set)
    worker_metrics: WorkerMetrics | None = None  # set when serving with several workers
    request_ids: RequestIds = field(default_factory=lambda: RequestIds())

    def check_model(self, principal: Principal, model: str, *, routed: bool = True) -> None:
        """404 unless ``principal`` may use ``model`` and (``routed``) an alias serves it."""
        if not principal.may_use(model):
            raise ModelNotFound(
                f"The model '{model}' does not exist or you do not have access to it.",
                param="model",
            )
        if routed and model not in self.virtual_aliases:
            self.tables.table.route(model)  # ModelNotFound for an unknown alias


class RequestIds:
    """Unique request ids without a syscall each: a random process prefix and a counter."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):08x}"


GATEWAY = web.AppKey("fleetgate.gateway", GatewayState)
