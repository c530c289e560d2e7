"""Send one request through an alias: pick, retry with backoff, cool down, fall back.

Retries and fallbacks happen only before the first byte reaches the client: for streams the
provider returns after the first event, so everything here is still invisible to the client.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetgate.config.schema import RouterConfig
from fleetgate.errors import (
    ContextWindowExceeded,
    FleetgateError,
    NoHealthyDeployment,
    UpstreamError,
)
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch_hooks import admitted, preferred
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.strategies import RouteContext
from fleetgate.routing.table import AliasRoute, RouteTable
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["Dispatch", "DispatchObserver", "Dispatcher", "VersionPicker"]

CallBuilder = Callable[[Deployment], UpstreamCall]
Prepare = Callable[[Sequence[Deployment], RouteContext], Awaitable[None]]


class VersionPicker(Protocol):
    """Narrows an alias's candidates to one deployment version (a canary split)."""

    def narrow(
        self, alias: str, candidates: Sequence[Deployment], ctx: RouteContext
    ) -> list[Deployment]: ...


class DispatchObserver(Protocol):
    """Hears of every attempt: sent, first token (stream answered / body received), ended."""

    def dispatched(self, dep: Deployment, ctx: RouteContext) -> object:
        """Returns a ticket passed back to the two calls below."""
        ...

    def first_token(self, ticket: object) -> None: ...

    def finished(self, ticket: object) -> None: ...


class _NoObserver:
    def dispatched(self, dep: Deployment, ctx: RouteContext) -> object:
        return None

    def first_token(self, ticket: object) -> None:
        pass

    def finished(self, ticket: object) -> None:
        pass


@dataclass(slots=True)
class Dispatch:
    """A successful attempt. The deployment's in-flight count is held until `release`."""

    response: UpstreamResponse
    deployment: Deployment
    route: AliasRoute
    attempts: int
    upstream_started: float
    upstream_answered: float
    observer: DispatchObserver | None = None
    ticket: object = None

    def release(self) -> None:
        self.deployment.state.in_flight -= 1
        if self.observer is not None:
            self.observer.finished(self.ticket)


class Dispatcher:
    def __init__(
        self,
        config: RouterConfig,
        health: HealthTracker,
        metrics: GatewayMetrics,
        rng: random.Random | None = None,
        observer: DispatchObserver | None = None,
    ) -> None:
        self.config = config
        self._health = health
        self._metrics = metrics
        self._rng = rng or random.Random()
        self.observer = observer
        self.versions: VersionPicker | None = None  # canary splits (routing/canary.py)

    def _candidates(
        self, route: AliasRoute, ctx: RouteContext, local_only: bool
    ) -> tuple[list[Deployment], bool]:
        """Deployments allowed for this hop, and whether any was dropped for its window."""
        allowed = [d for d in route.deployments if d.is_local or not local_only]
        fitting = [d for d in allowed if d.fits(ctx.prompt_tokens, ctx.max_tokens)]
        dropped = len(fitting) < len(allowed)
        if self.versions is not None and fitting:
            fitting = self.versions.narrow(route.name, fitting, ctx)
        return fitting, dropped

    async def _backoff(self, attempt: int) -> None:
        base = self.config.retry_backoff_s * (2 ** (attempt - 1))
        delay = min(self.config.retry_backoff_max_s, base) * (0.5 + self._rng.random())
        if delay > 0:
            await asyncio.sleep(delay)

    async def send(self, table: RouteTable, ctx: RouteContext, build: CallBuilder) -> Dispatch:
        chain = table.chain(ctx.alias)
        local_only = chain[0].local_only
        last_error: FleetgateError | None = None
        too_long = False
        for hop, route in enumerate(chain):
            fitting, dropped = self._candidates(route, ctx, local_only)
            too_long = too_long or (dropped and not fitting)
            if not fitting:
                continue
            if hop > 0:
                self._metrics.fallbacks.labels(chain[0].name, route.name).inc()
            result, error = await self._try_route(route, fitting, ctx, build)
            if result is not None:
                return result
            last_error = error or last_error
        if last_error is not None:
            raise last_error
        if too_long:
            raise ContextWindowExceeded(
                f"This request needs about {ctx.prompt_tokens + ctx.max_tokens} tokens "
                f"(prompt {ctx.prompt_tokens} + max_tokens {ctx.max_tokens}), more than the "
                f"context window of every deployment of '{ctx.alias}' and its fallbacks.",
                param="messages",
            )
        raise NoHealthyDeployment(f"No deployment of '{ctx.alias}' can serve this request.")

    async def _try_route(
        self,
        route: AliasRoute,
        fitting: list[Deployment],
        ctx: RouteContext,
        build: CallBuilder,
    ) -> tuple[Dispatch | None, FleetgateError | None]:
        retries = route.config.num_retries
        budget = (self.config.num_retries if retries is None else retries) + 1
        tried: set[int] = set()
        last_error: FleetgateError | None = None
        prepare: Prepare | None = getattr(route.strategy, "prepare", None)
        if prepare is not None:
            await prepare(fitting, ctx)
        observer: DispatchObserver = self.observer or _NoObserver()
        for attempt in range(budget):
            now = time.monotonic()
            healthy = [d for d in fitting if d.state.healthy(now)]
            if not healthy:
                break
            fresh = [d for d in healthy if id(d) not in tried]
            pool = fresh or healthy
            if ctx.dispatch_hooks:
                pool = preferred(ctx.dispatch_hooks, pool)
            dep = route.strategy.pick(pool, ctx)
            tried.add(id(dep))
            if attempt > 0:
                await self._backoff(attempt)
            dep.state.in_flight += 1
            ticket = observer.dispatched(dep, ctx)
            started = time.perf_counter()
            try:
                async with admitted(ctx.dispatch_hooks, dep):
                    response = await dep.provider.send(build(dep))
            except UpstreamError as exc:
                dep.state.in_flight -= 1
                observer.finished(ticket)
                self._health.failure(dep, exc)
                if not exc.retryable:
                    raise
                last_error = exc
                self._metrics.retries.labels(
                    route.name, dep.id, dep.version, exc.code or type(exc).__name__
                ).inc()
                continue
            except BaseException:
                dep.state.in_flight -= 1
                observer.finished(ticket)
                raise
            self._health.success(dep)
            dep.state.requests += 1
            observer.first_token(ticket)
            answered = time.perf_counter()
            return (
                Dispatch(response, dep, route, attempt + 1, started, answered, observer, ticket),
                None,
            )
        if last_error is None:
            last_error = NoHealthyDeployment(
                f"Every deployment of '{route.name}' is cooling down after failures."
            )
        return None, last_error
