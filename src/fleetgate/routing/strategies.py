"""Replica-choice strategies and their registry.

A strategy (`fleetgate.routing.context.Strategy`) picks one deployment among healthy
candidates that fit the request and returns it as a `Pick`. Built-ins register themselves in
`StrategyRegistry.with_builtins(engine_aware)` exactly as a third party would::

    registry = StrategyRegistry.with_builtins(engine_aware)
    registry.register("my-strategy", lambda alias_config: MyStrategy())
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

from fleetgate.config.schema import AliasConfig
from fleetgate.errors import ConfigError
from fleetgate.routing.context import Pick, RouteContext, Strategy
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.disagg import DisaggStrategy
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.kv_aware import KvAwareStrategy

__all__ = [
    "CostStrategy",
    "LatencyStrategy",
    "LeastLoadStrategy",
    "RoundRobinStrategy",
    "StrategyRegistry",
    "WeightedStrategy",
]


class WeightedStrategy:
    name = "weighted"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        if len(candidates) == 1:
            return Pick(candidates[0])
        weights = [d.config.weight for d in candidates]
        if sum(weights) <= 0:
            return Pick(self._rng.choice(candidates))
        return Pick(self._rng.choices(candidates, weights=weights)[0])


def _min_random_tie(
    candidates: Sequence[Deployment], key: Callable[[Deployment], float], rng: random.Random
) -> Deployment:
    if len(candidates) == 1:
        return candidates[0]
    best = min(key(d) for d in candidates)
    tied = [d for d in candidates if key(d) == best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


class LeastLoadStrategy:
    """Fewest requests in flight (this gateway's own count)."""

    name = "least-load"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        return Pick(_min_random_tie(candidates, lambda d: d.state.in_flight, self._rng))


class LatencyStrategy:
    """Lowest EWMA latency (time to first token of streams, else time to a JSON answer),
    scaled by the requests in flight; unmeasured deployments are tried first."""

    name = "latency"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        def key(d: Deployment) -> float:
            latency = d.state.latency_s()
            return 0.0 if latency is None else latency * (1 + d.state.in_flight)

        return Pick(_min_random_tie(candidates, key, self._rng))


class CostStrategy:
    """Cheapest price per token; ties broken by load."""

    name = "cost"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        cheapest = min(d.price_per_mtok() for d in candidates)
        pool = [d for d in candidates if d.price_per_mtok() == cheapest]
        return Pick(_min_random_tie(pool, lambda d: d.state.in_flight, self._rng))


class RoundRobinStrategy:
    """Each candidate in turn, blind to load and cache: the baseline engine-aware routing beats."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        return Pick(candidates[next(self._counter) % len(candidates)])


StrategyFactory = Callable[[AliasConfig], Strategy]


class StrategyRegistry:
    """Name → factory. One per app; config names a strategy per alias."""

    def __init__(self) -> None:
        self._factories: dict[str, StrategyFactory] = {}

    def register(self, name: str, factory: StrategyFactory) -> None:
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, alias: AliasConfig) -> Strategy:
        factory = self._factories.get(alias.strategy)
        if factory is None:
            raise ConfigError(
                f"models[alias={alias.alias}].strategy: unknown strategy {alias.strategy!r}; "
                f"known: {', '.join(self.names())}"
            )
        return factory(alias)

    @classmethod
    def with_builtins(cls, engine_aware: EngineAwareRouting) -> StrategyRegistry:
        """Every built-in strategy. ``engine_aware`` is the app's shared engine state for
        ``kv-aware`` and ``pd-disagg`` (`EngineAwareRouting.standalone` where there is no app:
        local tracking only).
        """
        registry = cls()
        registry.register("round-robin", lambda _: RoundRobinStrategy())

        def kv_aware(alias: AliasConfig) -> Strategy:
            return KvAwareStrategy(engine_aware, alias.alias)

        registry.register("kv-aware", kv_aware)

        def pd_disagg(alias: AliasConfig) -> Strategy:
            return DisaggStrategy(engine_aware, alias.alias)

        registry.register("pd-disagg", pd_disagg)
        registry.register("weighted", lambda _: WeightedStrategy())
        registry.register("least-load", lambda _: LeastLoadStrategy())
        registry.register("latency", lambda _: LatencyStrategy())
        registry.register("cost", lambda _: CostStrategy())
        return registry
