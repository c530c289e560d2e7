"""Replica-choice strategies and their registry.

A strategy picks one deployment among healthy candidates that fit the request. Built-ins
register themselves in `StrategyRegistry.with_builtins()` exactly as a third party would::

    registry = StrategyRegistry.with_builtins()
    registry.register("my-strategy", lambda alias_config: MyStrategy())
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fleetgate.config.schema import AliasConfig
from fleetgate.errors import ConfigError
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch_hooks import DispatchHook
from fleetgate.tenancy.principal import Principal

if TYPE_CHECKING:
    from fleetgate.routing.kv_aware import EngineAwareRouting

__all__ = [
    "CostStrategy",
    "LatencyStrategy",
    "LeastLoadStrategy",
    "RoundRobinStrategy",
    "RouteContext",
    "Strategy",
    "StrategyRegistry",
    "WeightedStrategy",
]


@dataclass(slots=True)
class RouteContext:
    """What a strategy may look at about the request."""

    alias: str
    principal: Principal | None = None
    prompt_tokens: int = 0
    max_tokens: int = 0
    prompt_text: str = ""
    session_id: str | None = None
    body: Mapping[str, Any] | None = None  # the request body (read-only for strategies)
    headers: Mapping[str, str] = field(default_factory=dict)  # forwarded request headers
    # Set by a strategy in `pick` for the deployment it picked: the prompt tokens it expects the
    # engine to compute (not served from its prefix cache), and fields to add to the upstream
    # body (for example vLLM's ``cache_salt``).
    uncached_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict)  # a strategy's per-request notes
    # Added by request stages: narrow the candidates and gate the send (see dispatch_hooks).
    dispatch_hooks: Sequence[DispatchHook] = ()


class Strategy(Protocol):
    name: str

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        """Choose one of ``candidates`` (never empty)."""
        ...


class WeightedStrategy:
    name = "weighted"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        if len(candidates) == 1:
            return candidates[0]
        weights = [d.config.weight for d in candidates]
        if sum(weights) <= 0:
            return self._rng.choice(candidates)
        return self._rng.choices(candidates, weights=weights)[0]


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

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        return _min_random_tie(candidates, lambda d: d.state.in_flight, self._rng)


class LatencyStrategy:
    """Lowest EWMA time to first token; unmeasured deployments are tried first."""

    name = "latency"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        def key(d: Deployment) -> float:
            ttft = d.state.ewma_ttft_s
            return 0.0 if ttft is None else ttft * (1 + d.state.in_flight)

        return _min_random_tie(candidates, key, self._rng)


class CostStrategy:
    """Cheapest price per token; ties broken by load."""

    name = "cost"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        cheapest = min(d.price_per_mtok() for d in candidates)
        pool = [d for d in candidates if d.price_per_mtok() == cheapest]
        return _min_random_tie(pool, lambda d: d.state.in_flight, self._rng)


class RoundRobinStrategy:
    """Each candidate in turn, blind to load and cache: the baseline engine-aware routing beats."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        return candidates[next(self._counter) % len(candidates)]


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
    def with_builtins(cls, engine_aware: EngineAwareRouting | None = None) -> StrategyRegistry:
        """Every built-in strategy. ``engine_aware`` is the app's shared engine state for
        ``kv-aware`` (without it each kv-aware alias keeps a private one: local tracking only).
        """
        from fleetgate.routing.kv_aware import EngineAwareRouting, KvAwareStrategy

        registry = cls()
        registry.register("round-robin", lambda _: RoundRobinStrategy())
        shared = engine_aware

        def kv_aware(alias: AliasConfig) -> Strategy:
            return KvAwareStrategy(shared or EngineAwareRouting.standalone(), alias.alias)

        registry.register("kv-aware", kv_aware)
        registry.register("weighted", lambda _: WeightedStrategy())
        registry.register("least-load", lambda _: LeastLoadStrategy())
        registry.register("latency", lambda _: LatencyStrategy())
        registry.register("cost", lambda _: CostStrategy())
        return registry
