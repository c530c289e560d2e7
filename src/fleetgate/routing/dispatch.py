"""Send one request through an alias: pick, retry with backoff, cool down, fall back.

Retries and fallbacks happen only before the first byte reaches the client: for streams the
provider returns after the first event, so everything here is still invisible to the client.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from fleetgate.config.schema import RouterConfig
from fleetgate.errors import (
    ContextWindowExceeded,
    FleetgateError,
    NoHealthyDeployment,
    UpstreamError,
)
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.strategies import RouteContext
from fleetgate.routing.table import AliasRoute, RouteTable
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["Dispatch", "Dispatcher"]

CallBuilder = Callable[[Deployment], UpstreamCall]


@dataclass(slots=True)
class Dispatch:
    """A successful attempt. The deployment's in-flight count is held until `release`."""

    response: UpstreamResponse
    deployment: Deployment
    route: AliasRoute
    attempts: int
    upstream_started: float
    upstream_answered: float

    def release(self) -> None:
        self.deployment.state.in_flight -= 1


class Dispatcher:
    def __init__(
        self,
        config: RouterConfig,
        health: HealthTracker,
        metrics: GatewayMetrics,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._health = health
        self._metrics = metrics
        self._rng = rng or random.Random()

    def _candidates(
        self, route: AliasRoute, ctx: RouteContext, local_only: bool
    ) -> tuple[list[Deployment], bool]:
        """Deployments allowed for this hop, and whether any was dropped for its window."""
        allowed = [d for d in route.deployments if d.is_local or not local_only]
        fitting = [d for d in allowed if d.fits(ctx.prompt_tokens, ctx.max_tokens)]
        return fitting, len(fitting) < len(allowed)

    async def _backoff(self, attempt: int) -> None:
        base = self.config.retry_backoff_s * (2 ** (attempt - 1))
        delay = min(self.config.retry_backoff_max_s, base) * (0.5 + self._rng.random())
        if delay > 0:
            await asyncio.sleep(delay)

    async def send(self, table: RouteTable, ctx: RouteContext, build: CallBuilder) -> Dispatch:
        chain = table.chain(ctx.alias)
        local_only = chain[0].config.local_only
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
        for attempt in range(budget):
            now = time.monotonic()
            healthy = [d for d in fitting if d.state.healthy(now)]
            if not healthy:
                break
            fresh = [d for d in healthy if id(d) not in tried]
            dep = route.strategy.pick(fresh or healthy, ctx)
            tried.add(id(dep))
            if attempt > 0:
                await self._backoff(attempt)
            dep.state.in_flight += 1
            started = time.perf_counter()
            try:
                response = await dep.provider.send(build(dep))
            except UpstreamError as exc:
                dep.state.in_flight -= 1
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
                raise
            self._health.success(dep)
            dep.state.requests += 1
            return (
                Dispatch(response, dep, route, attempt + 1, started, time.perf_counter()),
                None,
            )
        if last_error is None:
            last_error = NoHealthyDeployment(
                f"Every deployment of '{route.name}' is cooling down after failures."
            )
        return None, last_error
