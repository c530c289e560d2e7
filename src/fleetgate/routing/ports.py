"""The ports of the routing core (provided by `fleetgate.app.build_state`) and of the routing
features, and the dispatcher's own ports, which it reads once every feature is built
(`plug_dispatcher`): the version picker (rollouts, then canary splits), the waker
(scale-to-zero) and the fallback gate (a fallback passes the alias's limits)."""

from __future__ import annotations

from fleetgate.core import Port, Ports
from fleetgate.limits.base import Limiter
from fleetgate.routing.canary import CanarySplits
from fleetgate.routing.deployment_rate import DeploymentRates
from fleetgate.routing.dispatch import Dispatcher, FallbackGate, VersionPicker
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.fallback_limits import FallbackLimits
from fleetgate.routing.reload import TableManager
from fleetgate.routing.semantic_stage import SemanticStage
from fleetgate.routing.wake import Waker
from fleetgate.tenancy.ports import TENANCY

__all__ = [
    "CANARY",
    "DISPATCHER",
    "ENGINE_ROUTING",
    "FALLBACK_GATE",
    "SEMANTIC",
    "TABLES",
    "VERSION_PICKER",
    "WAKER",
    "plug_dispatcher",
]

TABLES: Port[TableManager] = Port("tables")
"""The route table and its reloads (``tables.table`` is the current one)."""

DISPATCHER: Port[Dispatcher] = Port("dispatcher")

ENGINE_ROUTING: Port[EngineAwareRouting] = Port("engine-routing")
"""Engine stats, the prefix index and the decision log (the dispatcher's observer)."""

CANARY: Port[CanarySplits] = Port("canary")
SEMANTIC: Port[SemanticStage] = Port("semantic")

VERSION_PICKER: Port[VersionPicker] = Port("version-picker")
WAKER: Port[Waker] = Port("waker")
FALLBACK_GATE: Port[FallbackGate] = Port("fallback-gate")


def plug_dispatcher(ports: Ports, shared: Limiter | None = None) -> None:
    """The dispatcher takes its ports once every feature is built: the version picker, the
    waker, the fallback gate (given, or tenancy's limits when tenancy is on) and the
    deployments' rate windows (tenancy's limiter when it is on, else ``shared`` — the fleet's
    Redis where one is configured — else in process)."""
    dispatcher = ports.require(DISPATCHER)
    dispatcher.versions = ports.get(VERSION_PICKER)
    dispatcher.waker = ports.get(WAKER)
    gate = ports.get(FALLBACK_GATE)
    tenancy = ports.get(TENANCY)
    dispatcher.fallback_gate = gate if gate is not None else FallbackLimits.of(tenancy)
    # deployments' rpm / tpm in tenancy's limiter: one window per deployment for the fleet
    dispatcher.rates = DeploymentRates.of(tenancy, shared)
