"""Send one request through an alias: pick, retry with backoff, cool down, fall back.

Retries and fallbacks happen only before the first byte reaches the client: for streams the
provider returns after the first event, so everything here is still invisible to the client.

The answer comes only as an async context manager, so the deployment's in-flight count and the
upstream connection are always given back::

    async with dispatcher.dispatch(table, req, build) as sent:
        ...  # read sent.response; sent.upstream_done = True once the stream reached its end

Why one module: `dispatch` (fleetgate's relay sends) and `choose` (a data plane sends, behind
``fleetgate epp``) are one routing policy applied twice, and must stay in step: each rule of
the send path has its twin on the pick path beside it (the hold for a pool scaled to zero:
`_send` / `_hold`; waking a pick known asleep: `_send_awake` / `_wake_chosen`; the rpm / tpm
window: `_before` / `_rated_picks`), and both read the same parts plugged into the `Dispatcher`
(waker, rates, versions, fallback gate, regions). Split by path, a change to one rule would
land in one module and not in the other; `Dispatch` and `_Sending` are the send path's answer
and call back into the dispatcher.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from fleetgate.config.schema import RouterConfig
from fleetgate.contract.flow import pass_gate
from fleetgate.errors import (
    FleetgateError,
    NoHealthyDeployment,
    RateLimited,
    UpstreamConnectError,
    UpstreamContextExceeded,
    UpstreamError,
)
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.routing.context import Pick, RouteContext, RoutedRequest
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.deployment_rate import NO_HOLD, DeploymentRates, RateHold
from fleetgate.routing.encoder import EncoderStep
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.regions import RegionPreference
from fleetgate.routing.salt import TenantSalt
from fleetgate.routing.send import send_admitted
from fleetgate.routing.table import AliasRoute, RouteTable
from fleetgate.routing.wake import Waker
from fleetgate.routing.walk import FallbackGate, Hop, RouteWalk, VersionPicker, settle_fallbacks
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = [
    "CallBuilder",
    "Chosen",
    "Dispatch",
    "DispatchObserver",
    "Dispatcher",
    "FAILED_VERSIONS",
    "FallbackGate",
    "VersionPicker",
]

# The upstream call of one attempt, from the strategy's pick (its deployment and body fields).
CallBuilder = Callable[[Pick], UpstreamCall]


FAILED_VERSIONS = "routing.failed_versions"
"""``request.state`` key: ``(alias, version)`` of each failed attempt of the request, in order
(a rollout's analysis counts each against the version that failed, whoever answered at last)."""


class DispatchObserver(Protocol):
    """Hears of every attempt: sent, first token (stream answered / body received), ended."""

    def dispatched(self, pick: Pick, ctx: RouteContext) -> object:
        """Returns a ticket passed back to the two calls below."""
        ...

    def first_token(self, ticket: object) -> None: ...

    def finished(self, ticket: object) -> None: ...


class _NoObserver:
    def dispatched(self, pick: Pick, ctx: RouteContext) -> object:
        return None

    def first_token(self, ticket: object) -> None:
        pass

    def finished(self, ticket: object) -> None:
        pass


@dataclass(slots=True)
class Dispatch:
    """A successful attempt. The deployment's in-flight count and the upstream connection are
    held until the `Dispatcher.dispatch` block ends."""

    response: UpstreamResponse
    deployment: Deployment
    route: AliasRoute
    attempts: int
    upstream_started: float
    upstream_answered: float
    observer: DispatchObserver
    ticket: object = None
    upstream_done: bool = False  # the stream reached its end: the connection may be kept
    rate: RateHold = NO_HOLD  # the deployment's rpm / tpm hold, settled with the usage

    async def _close(self) -> None:
        try:
            await self.response.aclose(graceful=self.upstream_done)
        finally:
            self.deployment.state.in_flight -= 1
            self.observer.finished(self.ticket)
            self.rate.settle()


class _Sending:
    """`Dispatcher.dispatch`'s context manager: sends on entry, gives everything back on exit."""

    __slots__ = ("_build", "_ctx", "_dispatcher", "_sent", "_table")

    def __init__(
        self, dispatcher: Dispatcher, table: RouteTable, ctx: RouteContext, build: CallBuilder
    ) -> None:
        self._dispatcher = dispatcher
        self._table = table
        self._ctx = ctx
        self._build = build
        self._sent: Dispatch | None = None

    async def __aenter__(self) -> Dispatch:
        ctx = self._ctx
        try:
            sent = self._sent = await self._dispatcher._send(self._table, ctx, self._build)
        except BaseException:
            settle_fallbacks(ctx, 0)
            raise
        if ctx.fallbacks:  # the fallbacks that did not answer (most requests hold none)
            settle_fallbacks(ctx, 0, keep=sent.route.name)
        req = ctx.request
        if req.gate is not None:  # a reservation overlapped the upstream call: it decides now
            try:
                await pass_gate(req)
            except BaseException:
                self._sent = None
                try:
                    await sent._close()  # refused: the upstream call is aborted, nothing relayed
                finally:
                    settle_fallbacks(ctx, 0)
                raise
        return sent

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        sent, self._sent = self._sent, None
        if sent is not None:
            try:
                await sent._close()
            finally:
                if self._ctx.fallbacks:  # the fallback alias that answered: what it used
                    usage = self._ctx.request.outcome
                    used = usage.prompt_tokens + usage.completion_tokens
                    settle_fallbacks(self._ctx, used or None)


def _failed_version(ctx: RouteContext, alias: str, dep: Deployment) -> None:
    state = getattr(ctx.request, "state", None)
    if state is not None:
        state.setdefault(FAILED_VERSIONS, []).append((alias, dep.version))


@dataclass(slots=True)
class Chosen:
    """`Dispatcher.choose`'s picks for a data plane that sends the request itself:
    ``picks[0]`` first, then those it retries on, in order (same upstream model as the first,
    so one body serves them all). The fallback alias answering keeps its admission in
    ``ctx.fallbacks`` until the caller settles it (`fleetgate.routing.walk.settle_fallbacks`)."""

    picks: list[Pick]
    route: AliasRoute
    ctx: RouteContext
    # ``picks[0]`` taken into its deployment's rpm / tpm window: the caller settles it once
    # the response ended (`RateHold.settle`)
    rate: RateHold = NO_HOLD


class Dispatcher:
    """Routes requests: `dispatch` picks and sends (retries, fallbacks, wake holds) for
    fleetgate's relay; `choose` only picks, for a data plane that sends (Envoy behind
    ``fleetgate epp``). Both walk the alias chain the same way (`walk`)."""

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
        self.salt: TenantSalt | None = None  # cache_salt per tenant (routing/salt.py)
        self._regions = RegionPreference(None)
        self.waker: Waker | None = None  # scale-to-zero holds and sleep mode (routing/wake.py)
        self.encoder: EncoderStep | None = None  # encoder pools (routing/encoder.py)
        # the limits of the aliases a request falls back into (routing/fallback_limits.py)
        self.fallback_gate: FallbackGate | None = None
        # deployments' rpm / tpm (routing/deployment_rate.py): tenancy's limiter once plugged
        self.rates = DeploymentRates.of(None)

    @property
    def attempt_observer(self) -> DispatchObserver:
        """The observer of every attempt (one that hears nothing when none is set)."""
        return self.observer or _NoObserver()

    def walk(
        self, table: RouteTable, ctx: RouteContext, only: Callable[[Deployment], bool] | None = None
    ) -> RouteWalk:
        """The walk of ``ctx``'s alias chain (`fleetgate.routing.walk`); ``only``: the
        deployments the caller allows (None: all)."""
        return RouteWalk(
            table,
            ctx,
            health=self._health,
            metrics=self._metrics,
            regions=self._region_preference(),
            versions=self.versions,
            salt=self.salt,
            encoder=self.encoder,
            fallback_gate=self.fallback_gate,
            only=only,
        )

    async def choose(
        self,
        table: RouteTable,
        req: RoutedRequest,
        *,
        only: Callable[[Deployment], bool] | None = None,
        count: int = 1,
        distinct: Callable[[Deployment], Hashable] | None = None,
        hold_s: float | None = None,
    ) -> Chosen:
        """The picks for ``req`` without sending it: the first alias of its chain with a
        healthy deployment that ``only`` allows, and up to ``count`` picks there (the first,
        then those a data plane retries on; ``distinct``: deployments with one key are listed
        once, e.g. two on one engine). Raises what `dispatch` raises when nothing could be
        sent: `NoHealthyDeployment`, `ContextWindowExceeded`, `RateLimited` (every one at
        its ``rpm`` / ``tpm``), a fallback alias's refusal.

        As the relay: when nothing is healthy, a pool with ``wake:`` (scaled to zero, asleep)
        is held for (`Waker.hold`, counted in ``fleetgate_held_requests``) for up to its
        ``wake.hold_s``, or ``hold_s`` when shorter (a data plane's own timeout), then picked
        again; a first pick known asleep is woken before it is returned.

        Example::

            chosen = await dispatcher.choose(table, req, count=3)
            send_to(chosen.picks[0].deployment, retry_on=chosen.picks[1:])
        """
        ctx = RouteContext(req)
        deadline: float | None = None
        try:
            while True:  # bounded: a hold ends by its deadline
                try:
                    chosen = await self._choose_once(table, ctx, only, max(1, count), distinct)
                except NoHealthyDeployment as exc:
                    # nothing healthy: a pool scaled to zero (or asleep) is held for, as the
                    # relay holds it, then picked again
                    if deadline is None:
                        deadline = self._hold_deadline(table, ctx, only, hold_s)
                    await self._hold(table, ctx, only, deadline, exc)
                    continue
                await self._wake_chosen(chosen)
                return chosen
        except BaseException:
            settle_fallbacks(ctx, 0)
            raise

    async def _choose_once(
        self,
        table: RouteTable,
        ctx: RouteContext,
        only: Callable[[Deployment], bool] | None,
        count: int,
        distinct: Callable[[Deployment], Hashable] | None,
    ) -> Chosen:
        walk = self.walk(table, ctx, only)
        for route in walk.chain:
            hop = await walk.enter(route)
            if hop is None:
                continue
            picks, rate = await self._rated_picks(walk, hop, count, distinct or id)
            if picks:
                try:
                    settle_fallbacks(ctx, 0, keep=route.name)
                except BaseException:
                    rate.settle()  # nothing returned: the caller could not settle it
                    raise
                return Chosen(picks, route, ctx, rate)
            if hop.candidates:  # none healthy (those without rpm / tpm room are gone)
                walk.failed(_cooling(route))
        raise walk.failure()

    def _hold_deadline(
        self,
        table: RouteTable,
        ctx: RouteContext,
        only: Callable[[Deployment], bool] | None,
        hold_s: float | None,
    ) -> float:
        """When `choose`'s hold ends: the largest ``wake.hold_s`` of the wake-able
        deployments ``only`` allows, at most ``hold_s``, from now."""
        waking = self._wakeable(table, ctx.request.alias)
        holds = [d.config.wake.hold_s for d in waking if d.config.wake and (not only or only(d))]
        longest = max(holds, default=0.0)
        return time.monotonic() + (longest if hold_s is None else min(hold_s, longest))

    async def _hold(
        self,
        table: RouteTable,
        ctx: RouteContext,
        only: Callable[[Deployment], bool] | None,
        deadline: float,
        nothing: NoHealthyDeployment,
    ) -> None:
        """`choose` found nothing healthy: wait (`Waker.hold`) until a wake-able deployment
        that ``only`` allows answers again, or raise ``nothing`` when there is none to wait
        for or ``deadline`` passed."""
        waking = self._wakeable(table, ctx.request.alias)
        if only is not None:
            waking = [d for d in waking if only(d)]
        if self.waker is None or not waking or time.monotonic() >= deadline:
            raise nothing
        if not await self.waker.hold(ctx.request.alias, waking, deadline):
            raise nothing

    async def _wake_chosen(self, chosen: Chosen) -> None:
        """The data plane sends to ``picks[0]`` as soon as `choose` returns: one the gateway
        knows asleep is woken first (as the relay wakes it before its send; its rate hold is
        given back when it does not wake). The retry picks known asleep are left out (they
        would refuse the data plane's retry); they stay asleep."""
        waker = self.waker
        if waker is None:
            return
        first, *rest = chosen.picks
        if first.deployment.state.asleep:
            try:
                await waker.ensure_awake(first.deployment)
            except BaseException:
                chosen.rate.settle()
                raise
        chosen.picks = [first, *(p for p in rest if not p.deployment.state.asleep)]

    def _region_preference(self) -> RegionPreference:
        """The config's region preference (rebuilt when a reload swapped the config)."""
        config = self.config
        prefs = self._regions
        if prefs.local != config.region or prefs.order != config.region_failover:
            prefs = self._regions = RegionPreference(config.region, config.region_failover)
        return prefs

    def _retry_deployments(
        self, route: AliasRoute, fitting: list[Deployment], failed: Deployment, ctx: RouteContext
    ) -> list[Deployment]:
        """After ``failed`` failed: the deployments of the version the version picker moves the
        retries to (those that fit the prompt, local ones only when only local ones were
        allowed), else ``fitting`` unchanged."""
        if self.versions is None:
            return fitting
        version = self.versions.retry_version(route.name, failed)
        if version is None or version == failed.version:
            return fitting
        req = ctx.request
        local_only = all(d.is_local for d in fitting)
        moved = [
            d
            for d in route.deployments
            if d.version == version
            and (d.is_local or not local_only)
            and d.fits(d.prompt_tokens(req.body, req.prompt_tokens), req.max_tokens)
        ]
        return moved or fitting

    async def _rated_picks(
        self, walk: RouteWalk, hop: Hop, count: int, distinct: Callable[[Deployment], Hashable]
    ) -> tuple[list[Pick], RateHold]:
        """`_picks`, the first taken into its deployment's ``rpm`` / ``tpm`` window (as the
        relay takes an attempt); one without room leaves the candidates, the walk hears why.
        The rest (where a data plane retries without asking again) are only uncapped
        deployments: a retry there would escape the capped one's window."""
        while True:  # bounded: each refusal removes a candidate
            picks = _picks(walk, hop, count, distinct)
            if not picks:
                return picks, NO_HOLD
            first, *rest = picks
            picks = [first, *(p for p in rest if not p.deployment.rate_capped)]
            if not first.deployment.rate_capped:
                return picks, NO_HOLD
            dep = first.deployment
            rate = await self.rates.take(dep, walk.ctx.request)
            if isinstance(rate, RateHold):
                return picks, rate
            walk.failed(rate)
            hop.candidates = [d for d in hop.candidates if d is not dep]

    async def _before(
        self, attempt: int, dep: Deployment, ctx: RouteContext
    ) -> RateHold | RateLimited:
        """Before an attempt to ``dep``: a retry's backoff, then its ``rpm`` / ``tpm`` window
        (`fleetgate.routing.deployment_rate`): the hold, or the refusal when it has no room."""
        if attempt > 0:
            await self._backoff(attempt)
        return await self.rates.take(dep, ctx.request) if dep.rate_capped else NO_HOLD

    async def _backoff(self, attempt: int) -> None:
        base = self.config.retry_backoff_s * (2 ** (attempt - 1))
        delay = min(self.config.retry_backoff_max_s, base) * (0.5 + self._rng.random())
        if delay > 0:
            await asyncio.sleep(delay)

    def dispatch(self, table: RouteTable, req: RoutedRequest, build: CallBuilder) -> _Sending:
        """Send ``req`` through its alias (retries, fallbacks): ``async with`` it."""
        return _Sending(self, table, RouteContext(req), build)

    async def _send(self, table: RouteTable, ctx: RouteContext, build: CallBuilder) -> Dispatch:
        deadline: float | None = None
        while True:
            try:
                return await self._send_once(table, ctx, build)
            except (NoHealthyDeployment, UpstreamConnectError):
                # nothing answered: a pool scaled to zero (or asleep) is held for, not failed
                waking = self._wakeable(table, ctx.request.alias)
                if self.waker is None or not waking:
                    raise
                if deadline is None:
                    hold = max(d.config.wake.hold_s for d in waking if d.config.wake)
                    deadline = time.monotonic() + hold
                if not await self.waker.hold(ctx.request.alias, waking, deadline):
                    raise

    async def _send_once(
        self, table: RouteTable, ctx: RouteContext, build: CallBuilder
    ) -> Dispatch:
        walk = self.walk(table, ctx)
        for route in walk.chain:
            hop = await walk.enter(route)
            if hop is None:
                continue
            result = await self._try_route(walk, hop, build)
            if result is not None:
                return result
        raise walk.failure()

    @staticmethod
    def _wakeable(table: RouteTable, alias: str) -> list[Deployment]:
        """The deployments of ``alias``'s chain that may be scaled to zero or asleep."""
        return [d for route in table.chain(alias) for d in route.deployments if d.config.wake]

    async def _try_route(self, walk: RouteWalk, hop: Hop, build: CallBuilder) -> Dispatch | None:
        """Pick and send on ``hop``'s alias, retrying; None when every attempt failed (the
        walk heard why)."""
        ctx = walk.ctx
        route = hop.route
        retries = route.config.num_retries
        budget = (self.config.num_retries if retries is None else retries) + 1
        tried: set[int] = set()
        last_error: FleetgateError | None = None
        observer = self.attempt_observer
        regions = walk.regions
        attempt = -1
        free = 0  # connection refused in a failing region: retried elsewhere at no cost
        while attempt + 1 < budget + free:
            attempt += 1
            pick = walk.pick(hop, tried)
            if pick is None:
                break
            dep = pick.deployment
            tried.add(id(dep))
            # a retry's backoff; rpm / tpm: taken in the deployment's window (the fleet's with
            # Redis), or the deployment is passed over at no cost to the retries
            rate = await self._before(attempt, dep, ctx) if attempt or dep.rate_capped else NO_HOLD
            if not isinstance(rate, RateHold):
                hop.candidates = [d for d in hop.candidates if d is not dep]
                last_error, free = last_error or rate, free + 1
                continue
            dep.state.in_flight += 1
            dep.state.last_request_at = time.monotonic()
            ticket = observer.dispatched(pick, ctx)
            started = time.perf_counter()
            try:
                response = await self._send_awake(pick, hop, build, ctx)
            except UpstreamError as exc:
                dep.state.in_flight -= 1
                observer.finished(ticket)
                rate.settle()
                if isinstance(exc, UpstreamContextExceeded):
                    # Not the deployment's fault (no cooldown), but it cannot take this prompt:
                    # try the others, then the fallbacks, as for a prompt estimated too long.
                    hop.candidates = [d for d in hop.candidates if d is not dep]
                else:
                    self._health.failure(dep, exc)
                _failed_version(ctx, route.name, dep)
                if not exc.retryable:
                    raise
                last_error = exc
                hop.candidates = self._retry_deployments(route, hop.candidates, dep, ctx)
                if regions.active and isinstance(exc, UpstreamConnectError) and free < len(tried):
                    free += 1  # the engine is gone (refused, reset): a dying region costs no retry
                self._metrics.retries.labels(
                    route.name, dep.id, dep.version, exc.code or type(exc).__name__
                ).inc()
                continue
            except BaseException:
                dep.state.in_flight -= 1
                observer.finished(ticket)
                rate.settle()
                raise
            self._health.success(dep)
            dep.state.requests += 1
            observer.first_token(ticket)
            answered = time.perf_counter()
            return Dispatch(
                response, dep, route, attempt + 1, started, answered, observer, ticket, rate=rate
            )
        walk.failed(last_error or _cooling(route))
        return None

    async def _send_awake(
        self, pick: Pick, hop: Hop, build: CallBuilder, ctx: RouteContext
    ) -> UpstreamResponse:
        """One attempt's send to ``pick``: woken first when it is known asleep, and sent once
        more when it refused because it slept unknown to this replica (another replica's
        reclaim put it to sleep just after the pick) and the waker woke it: a sleeping
        engine is capacity to wake, not a failed attempt."""
        dep = pick.deployment
        waker = self.waker
        if dep.state.asleep and waker is not None:
            await waker.ensure_awake(dep)
        sent_at = time.monotonic()
        try:
            return await send_admitted(pick, hop, build, ctx)
        except UpstreamError as exc:
            if waker is None or dep.config.wake is None or not exc.retryable:
                raise
            if isinstance(exc, UpstreamContextExceeded):
                raise
            if not await waker.woken_after_refusal(dep, sent_at):
                raise
        return await send_admitted(pick, hop, build, ctx)


def _cooling(route: AliasRoute) -> NoHealthyDeployment:
    return NoHealthyDeployment(
        f"Every deployment of '{route.name}' is cooling down after failures."
    )


def _picks(
    walk: RouteWalk, hop: Hop, count: int, distinct: Callable[[Deployment], Hashable]
) -> list[Pick]:
    """Up to ``count`` picks on ``hop``, each a deployment not picked before, serving the
    first's upstream model, with a ``distinct`` key not listed before."""
    tried: set[int] = set()
    keys: set[Hashable] = set()
    picks: list[Pick] = []

    def keep(dep: Deployment) -> bool:
        if id(dep) in tried:
            return False
        return not picks or dep.config.model == picks[0].deployment.config.model

    for _ in range(count):  # bounded: one pick per listed endpoint
        pick = walk.pick(hop, tried, keep)
        if pick is None:
            break
        tried.add(id(pick.deployment))
        key = distinct(pick.deployment)
        if key in keys:
            continue
        keys.add(key)
        picks.append(pick)
    return picks
