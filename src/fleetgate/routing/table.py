"""The route table: aliases → deployments and strategies, built from one config.

A new table is built on every config reload and swapped in atomically; requests in flight
keep the table they started with. Live deployment state is carried over by `deployment_key`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fleetgate.config.schema import AliasConfig, DeploymentConfig, GatewayConfig
from fleetgate.errors import ModelNotFound
from fleetgate.providers.base import Provider
from fleetgate.routing.context import Strategy
from fleetgate.routing.deployment import Deployment, DeploymentState, deployment_key
from fleetgate.routing.encoder import ENCODER_TAG
from fleetgate.routing.strategies import StrategyRegistry

__all__ = ["AliasRoute", "ProviderFactory", "RouteTable"]

ProviderFactory = Callable[[DeploymentConfig], Provider]


class AliasRoute:
    """One alias: its config, deployments and strategy."""

    __slots__ = ("config", "deployments", "strategy", "local_only", "has_encoders")

    def __init__(
        self, config: AliasConfig, deployments: list[Deployment], strategy: Strategy
    ) -> None:
        self.config = config
        self.deployments = deployments
        self.strategy = strategy
        self.local_only = config.local_only  # computed once, read per request
        # an encoder pool (deployments tagged `routing.encoder.ENCODER_TAG`): computed once
        self.has_encoders = any(ENCODER_TAG in d.config.tags for d in deployments)

    @property
    def name(self) -> str:
        return self.config.alias


class RouteTable:
    def __init__(self, config: GatewayConfig, routes: dict[str, AliasRoute]) -> None:
        self.config = config
        self._routes = routes
        self._chains: dict[str, list[AliasRoute]] = {}
        # Request headers the router reads (session affinity), lower-cased, computed once.
        self.affinity_headers = frozenset(h.lower() for h in config.routing.affinity_headers)

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        providers: ProviderFactory,
        strategies: StrategyRegistry,
        states: dict[str, DeploymentState],
    ) -> RouteTable:
        """Build a table; ``states`` is updated in place (kept for known deployments)."""
        routes: dict[str, AliasRoute] = {}
        seen: set[str] = set()
        for alias in config.models:
            deployments = []
            for dep_id, dep in alias.deployment_ids():
                key = deployment_key(dep)
                seen.add(key)
                state = states.setdefault(key, DeploymentState())
                deployments.append(Deployment(dep_id, alias.alias, dep, providers(dep), state))
            routes[alias.alias] = AliasRoute(alias, deployments, strategies.create(alias))
        for gone in set(states) - seen:
            del states[gone]
        return cls(config, routes)

    def aliases(self) -> list[str]:
        return list(self._routes)

    def listed_aliases(self) -> list[str]:
        """The aliases the model list shows: every one but those configured ``hidden``."""
        return [name for name, route in self._routes.items() if not route.config.hidden]

    def route(self, alias: str) -> AliasRoute:
        route = self._routes.get(alias)
        if route is None:
            raise ModelNotFound(
                f"The model '{alias}' does not exist or you do not have access to it.",
                param="model",
            )
        return route

    def chain(self, alias: str) -> list[AliasRoute]:
        """The alias, then its fallbacks in order (breadth first, each once)."""
        cached = self._chains.get(alias)
        if cached is not None:
            return cached
        first = self.route(alias)
        out = [first]
        seen = {alias}
        i = 0
        while i < len(out):
            for fb in out[i].config.fallbacks:
                if fb not in seen and fb in self._routes:
                    seen.add(fb)
                    out.append(self._routes[fb])
            i += 1
        self._chains[alias] = out
        return out

    def deployments(self) -> Iterator[Deployment]:
        for route in self._routes.values():
            yield from route.deployments
