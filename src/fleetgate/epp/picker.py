"""Pick the endpoints Envoy sends a request to, with fleetgate's own routing.

The pick is the relay's: `fleetgate.routing.dispatch.Dispatcher.choose` walks the alias chain
as the relay does (`fleetgate.routing.walk`), with the data plane's subset hint as the
deployments it may choose from. The relay sends the pick itself; here Envoy does, so the pick
and the fallbacks for Envoy's retries are returned instead, and the deployment's in-flight
count, its ``rpm`` / ``tpm`` window and the engine observer's ticket are held by the `Choice`
until the response ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from fleetgate.contract.dispatch import admitted
from fleetgate.contract.request import GatewayRequest
from fleetgate.epp.endpoints import endpoint_of
from fleetgate.errors import NoHealthyDeployment, UpstreamStatusError
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.deployment_rate import NO_HOLD, RateHold
from fleetgate.routing.dispatch import Dispatcher, DispatchObserver
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.reload import TableManager
from fleetgate.routing.wake import Waker
from fleetgate.routing.walk import settle_fallbacks

__all__ = ["Choice", "EndpointPicker"]


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
    # the primary's rpm / tpm hold (taken by `Dispatcher.choose`), settled on release
    rate: RateHold = NO_HOLD
    waker: Waker | None = None  # asked whether an engine that failed sleeps
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
        """Envoy sends to ``pick``: counted as the relay counts an attempt it sends."""
        dep = pick.deployment
        dep.state.in_flight += 1
        dep.state.requests += 1
        dep.state.last_request_at = time.monotonic()
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
            if self.waker is not None and status != 429:  # asleep unknown to us: wake it next
                self.waker.refused_elsewhere(dep)

    async def release(self, used: int | None) -> None:
        """The response ended: give back the count, the ticket, the hooks and the fallback
        aliases' admissions (``used``: the tokens the request used, None: unknown)."""
        try:
            self._drop()
            await self._hooks.aclose()
        finally:
            self.rate.settle()
            settle_fallbacks(self.ctx, used)


class EndpointPicker:
    """Picks for Envoy with the dispatcher's routing (`Dispatcher.choose`: the relay's walk of
    the alias chain, strategies, health, canary, salt, rate caps, fallback admission).

    ``fallbacks``: endpoints listed after the pick for Envoy's retries (same upstream model,
    so the rewritten body stays valid for them). ``hold_s``: the longest a pick waits for a
    pool with ``wake:`` to come up or wake (below Envoy's ext_proc ``message_timeout``)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        tables: TableManager,
        health: HealthTracker,
        fallbacks: int,
        hold_s: float = 8.0,
    ) -> None:
        self._dispatcher = dispatcher
        self._tables = tables
        self._health = health
        self.fallbacks = max(0, fallbacks)
        self.hold_s = hold_s

    async def choose(self, req: GatewayRequest, subset: Sequence[str] | None) -> Choice:
        """The pick for ``req`` among ``subset`` (None: the whole pool); 503 when none is
        eligible (`NoHealthyDeployment`), the fallback alias's refusal when only it could.
        A pool scaled to zero or asleep is waited for (as the relay holds the request), a first
        pick known asleep woken before Envoy sends to it: all of it within ``hold_s``, the
        wake-up included (then 503 with ``Retry-After``; the wake-up goes on, and the retry
        waits on that same wake-up, never a second one)."""
        only = None
        if subset is not None:
            allowed = frozenset(subset)

            def only(dep: Deployment) -> bool:
                return endpoint_of(dep) in allowed

        dispatcher = self._dispatcher
        bound = asyncio.timeout(self.hold_s)  # no task: a timer only
        try:
            async with bound:
                chosen = await dispatcher.choose(
                    self._tables.table,
                    req,
                    only=only,
                    count=1 + self.fallbacks,
                    distinct=endpoint_of,
                    hold_s=self.hold_s,
                )
        except TimeoutError:
            if not bound.expired():
                raise
            # the pool's wake-up outlasts the hold (a long weight reload): the data plane's
            # timer would fire next; the wake-up itself goes on (shared, shielded)
            retry = str(max(1, round(self.hold_s)))
            raise NoHealthyDeployment(
                f"The pool of {req.alias!r} is waking up; retry in a few seconds.",
                headers={"Retry-After": retry},
            ) from None
        return Choice(
            chosen.picks,
            chosen.ctx,
            dispatcher.attempt_observer,
            self._health,
            rate=chosen.rate,
            waker=dispatcher.waker,
        )
