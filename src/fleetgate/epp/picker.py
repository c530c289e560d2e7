"""Pick the endpoints Envoy sends a request to, with fleetgate's own routing.

The dispatcher's steps, in its order, for one alias and its fallbacks: the candidates that fit
the prompt (and the canary split), the data plane's subset hint, the encoder pools and the
strategy's ``prepare``, health, region preference and the request's hooks, the strategy's
pick, then the fields every pick gets (the tenant's ``cache_salt``, the hooks' fields). The
relay sends the pick itself; here Envoy does, so the pick and the fallbacks for Envoy's retries
are returned instead, and the deployment's in-flight count and the engine observer's ticket
are held by the `Choice` until the response ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from fleetgate.contract.dispatch import admitted
from fleetgate.contract.request import GatewayRequest
from fleetgate.epp.endpoints import endpoint_of
from fleetgate.errors import NoHealthyDeployment, UpstreamStatusError
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch import Dispatcher, DispatchObserver
from fleetgate.routing.dispatch import _pool as healthy_pool
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.reload import TableManager

__all__ = ["Choice", "EndpointPicker"]


class _NoObserver:
    def dispatched(self, pick: Pick, ctx: RouteContext) -> object:
        return None

    def first_token(self, ticket: object) -> None:
        pass

    def finished(self, ticket: object) -> None:
        pass


@dataclass(eq=False)
class Choice:
    """A request's pick: ``picks[0]`` first, the rest in the order Envoy retries them.

    While it is held (``hold`` .. ``release``) the deployment serving it counts the request in
    flight (load-aware strategies read it) and the engine observer holds its ticket (queue and
    prefill estimates); ``served(endpoint)`` moves both to the endpoint that really served."""

    picks: list[Pick]
    ctx: RouteContext
    observer: DispatchObserver
    health: HealthTracker
    serving: Deployment | None = None
    _ticket: object = None
    _first: bool = False
    _hooks: AsyncExitStack = field(default_factory=AsyncExitStack)

    @property
    def endpoints(self) -> list[str]:
        return [endpoint_of(p.deployment) for p in self.picks]

    @property
    def primary(self) -> Pick:
        return self.picks[0]

    async def hold(self) -> None:
        """Count the request on the primary and enter the request hooks' admission for it."""
        pick = self.primary
        await self._hooks.enter_async_context(
            admitted(self.ctx.request.dispatch_hooks, pick.deployment)
        )
        self._take(pick)

    def _take(self, pick: Pick) -> None:
        dep = pick.deployment
        dep.state.in_flight += 1
        dep.state.requests += 1
        self.serving = dep
        self._ticket = self.observer.dispatched(pick, self.ctx)

    def _drop(self) -> None:
        if self.serving is not None:
            self.serving.state.in_flight -= 1
            self.observer.finished(self._ticket)
            self.serving = None

    def served(self, endpoint: str | None) -> Deployment | None:
        """The data plane says ``endpoint`` served: attribute the request to it (a fallback
        of the list after a retry); returns the deployment serving (None: none held)."""
        if endpoint is None or self.serving is None or endpoint_of(self.serving) == endpoint:
            return self.serving
        for pick in self.picks:
            if endpoint_of(pick.deployment) == endpoint:
                self._drop()
                self._take(pick)
                break
        return self.serving

    def answered(self, status: int) -> None:
        """The response's headers arrived (first token of a stream): the observer hears of
        it, and health: a 5xx or 429 from the engine (or Envoy's own 503 when it could not
        connect) counts as the relay counts a failed attempt, towards its cool-down."""
        dep = self.serving
        if dep is None or self._first:
            return
        self._first = True
        self.observer.first_token(self._ticket)
        if status < 500 and status != 429:
            self.health.success(dep)
        else:
            failed = UpstreamStatusError(
                f"{dep.id} answered {status} behind Envoy", upstream_status=status
            )
            self.health.failure(dep, failed)

    async def release(self, used: int | None) -> None:
        """The response ended: give back the count, the ticket, the hooks and the fallback
        aliases' admissions (``used``: the tokens the request used, None: unknown)."""
        try:
            self._drop()
            await self._hooks.aclose()
        finally:
            for alias in list(self.ctx.fallbacks):
                self.ctx.fallbacks.pop(alias)(used)


class EndpointPicker:
    """Picks for Envoy with the dispatcher's routing (strategies, health, canary, salt).

    ``fallbacks``: endpoints listed after the pick for Envoy's retries (same upstream model,
    so the rewritten body stays valid for them)."""

    def __init__(
        self, dispatcher: Dispatcher, tables: TableManager, health: HealthTracker, fallbacks: int
    ) -> None:
        self._dispatcher = dispatcher
        self._tables = tables
        self._health = health
        self.fallbacks = max(0, fallbacks)

    async def choose(self, req: GatewayRequest, subset: Sequence[str] | None) -> Choice:
        """The pick for ``req`` among ``subset`` (None: the whole pool); 503 when none is
        eligible (`NoHealthyDeployment`), the fallback alias's refusal when only it could."""
        dispatcher = self._dispatcher
        ctx = RouteContext(req)
        chain = self._tables.table.chain(req.alias)
        local_only = chain[0].local_only
        allowed = None if subset is None else frozenset(subset)
        refusal: Exception | None = None
        # the dispatcher's own steps (see the module doc); the send is Envoy's
        for hop, route in enumerate(chain):
            fitting, _ = dispatcher._candidates(route, ctx, local_only)
            if allowed is not None:
                fitting = [d for d in fitting if endpoint_of(d) in allowed]
            if not fitting:
                continue
            if hop > 0:
                refused = await dispatcher._admit_fallback(route.name, ctx)
                if refused is not None:
                    refusal = refusal or refused
                    continue
            fitting, hooks = await dispatcher._prepare(route, fitting, ctx)
            picks = self._picks(route.strategy, fitting, ctx, hooks)
            if picks:
                observer = dispatcher.observer or _NoObserver()
                return Choice(picks, ctx, observer, self._health)
        for alias in list(ctx.fallbacks):
            ctx.fallbacks.pop(alias)(0)
        if refusal is not None:
            raise refusal
        raise NoHealthyDeployment(f"No deployment of '{req.alias}' can serve this request.")

    def _picks(
        self, strategy: Any, fitting: list[Deployment], ctx: RouteContext, hooks: Sequence[Any]
    ) -> list[Pick]:
        dispatcher = self._dispatcher
        regions = dispatcher._region_preference()
        tried: set[int] = set()
        picks: list[Pick] = []
        for _ in range(1 + self.fallbacks):  # bounded: one pick per listed endpoint
            pool = [d for d in healthy_pool(fitting, tried, regions, hooks) if id(d) not in tried]
            if picks:  # a retry target must take the same body: the same upstream model
                model = picks[0].deployment.config.model
                pool = [d for d in pool if d.config.model == model]
            if not pool:
                break
            pick = dispatcher._finish_pick(strategy.pick(pool, ctx), ctx, hooks)
            tried.add(id(pick.deployment))
            if endpoint_of(pick.deployment) in {endpoint_of(p.deployment) for p in picks}:
                continue  # two deployments on one engine: listed once
            picks.append(pick)
        return picks
