"""Send one request through an alias: pick, retry with backoff, cool down, fall back.

Retries and fallbacks happen only before the first byte reaches the client: for streams the
provider returns after the first event, so everything here is still invisible to the client.

The answer comes only as an async context manager, so the deployment's in-flight count and the
upstream connection are always given back::

    async with dispatcher.dispatch(table, req, build) as sent:
        ...  # read sent.response; sent.upstream_done = True once the stream reached its end
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from fleetgate.config.schema import RouterConfig
from fleetgate.contract.dispatch import DispatchHook, admitted, extra_fields, preferred
from fleetgate.contract.flow import pass_gate, refused, until_refused
from fleetgate.errors import (
    ClientError,
    ContextWindowExceeded,
    FleetgateError,
    NoHealthyDeployment,
    RateLimited,
    ServiceUnavailable,
    UpstreamConnectError,
    UpstreamContextExceeded,
    UpstreamError,
)
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.providers.engine_fields import sealed
from fleetgate.routing.context import Pick, RouteContext, RoutedRequest
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.encoder import ENCODER_TAG, EncoderStep
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.regions import RegionPreference
from fleetgate.routing.salt import TenantSalt
from fleetgate.routing.table import AliasRoute, RouteTable
from fleetgate.routing.wake import Waker
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = [
    "CallBuilder",
    "Dispatch",
    "DispatchObserver",
    "Dispatcher",
    "FAILED_VERSIONS",
    "FallbackGate",
    "VersionPicker",
]

# The upstream call of one attempt, from the strategy's pick (its deployment and body fields).
CallBuilder = Callable[[Pick], UpstreamCall]
Prepare = Callable[[Sequence[Deployment], RouteContext], Awaitable[None]]


FAILED_VERSIONS = "routing.failed_versions"
"""``request.state`` key: ``(alias, version)`` of each failed attempt of the request, in order
(a rollout's analysis counts each against the version that failed, whoever answered at last)."""


class VersionPicker(Protocol):
    """Narrows an alias's candidates to one deployment version (a canary split)."""

    def narrow(
        self, alias: str, candidates: Sequence[Deployment], ctx: RouteContext
    ) -> list[Deployment]: ...

    def retry_version(self, alias: str, failed: Deployment) -> str | None:
        """The version the request's next attempts go to after ``failed`` failed (a rollout's
        baseline after its candidate failed), or None to stay on the narrowed deployments."""
        ...


class FallbackGate(Protocol):
    """Admits a request into a fallback alias as a direct call to it would be admitted (its
    limits: `fleetgate.routing.fallback_limits`)."""

    async def admit(self, alias: str, req: RoutedRequest) -> Callable[[int | None], None] | None:
        """Returns when admitted: the settle of the admission (called once, with the tokens
        the request used there, None: unknown), or None when nothing is held. Raises the
        refusal (a `ClientError` or `ServiceUnavailable`) a direct call would get."""
        ...


def _settle_fallbacks(ctx: RouteContext, used: int | None, keep: str | None = None) -> None:
    """Settle the request's fallback admissions but ``keep``'s (the alias answering)."""
    for alias in [a for a in ctx.fallbacks if a != keep]:
        ctx.fallbacks.pop(alias)(used)


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

    async def _close(self) -> None:
        try:
            await self.response.aclose(graceful=self.upstream_done)
        finally:
            self.deployment.state.in_flight -= 1
            self.observer.finished(self.ticket)


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
            _settle_fallbacks(ctx, 0)
            raise
        _settle_fallbacks(ctx, 0, keep=sent.route.name)  # the fallbacks that did not answer
        req = ctx.request
        if req.gate is not None:  # a reservation overlapped the upstream call: it decides now
            try:
                await pass_gate(req)
            except BaseException:
                self._sent = None
                try:
                    await sent._close()  # refused: the upstream call is aborted, nothing relayed
                finally:
                    _settle_fallbacks(ctx, 0)
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
                    _settle_fallbacks(self._ctx, used or None)


async def _send_gated(
    dep: Deployment, call: UpstreamCall, gate: asyncio.Future[None] | None
) -> UpstreamResponse:
    """``dep.provider.send(call)``, stopped at once if ``gate`` (a reservation still in
    flight) closes with a refusal meanwhile: the upstream call is aborted (for a request that
    is not streamed, before the engine has generated the whole answer) and the refusal raised.
    A gate refused already (while the request waited for a wake, a retry's backoff or a
    fallback) sends nothing: the refusal is raised at once.
    """
    if gate is None:
        return await dep.provider.send(call)
    if refused(gate):
        gate.result()  # raises the refusal
    return await until_refused(gate, dep.provider.send(call))


def _with_hook_fields(hooks: Sequence[DispatchHook[Deployment]], pick: Pick) -> Pick:
    """``pick`` with the hooks' extra body fields for its deployment (vLLM's ``priority``)."""
    fields = extra_fields(hooks, pick.deployment)
    if not fields:
        return pick
    return Pick(pick.deployment, {**(pick.extra_body or {}), **fields}, pick.uncached_tokens)


def _failed_version(ctx: RouteContext, alias: str, dep: Deployment) -> None:
    state = getattr(ctx.request, "state", None)
    if state is not None:
        state.setdefault(FAILED_VERSIONS, []).append((alias, dep.version))


def _within_rate(fitting: list[Deployment], req: RoutedRequest) -> list[Deployment]:
    """The deployments whose ``rpm`` / ``tpm`` leave room this minute for ``req``."""
    return [d for d in fitting if d.within_rate(d.prompt_tokens(req.body, req.prompt_tokens))]


def _pool(
    fitting: Sequence[Deployment],
    tried: set[int],
    regions: RegionPreference,
    hooks: Sequence[DispatchHook[Deployment]],
) -> list[Deployment]:
    """The deployments one attempt picks from: healthy, not tried yet if any is left, in the
    best region that has one, narrowed by the request's hooks; empty when none is healthy."""
    now = time.monotonic()
    healthy = [d for d in fitting if d.state.healthy(now)]
    if not healthy:
        return []
    fresh = [d for d in healthy if id(d) not in tried]
    pool = fresh or healthy
    if regions.active:  # the local region while it has one, else the next region
        pool = regions.narrow(pool)
    if hooks:
        pool = preferred(hooks, pool)
    return pool


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
        self.salt: TenantSalt | None = None  # cache_salt per tenant (routing/salt.py)
        self._regions = RegionPreference(None)
        self.waker: Waker | None = None  # scale-to-zero holds and sleep mode (routing/wake.py)
        self.encoder: EncoderStep | None = None  # encoder pools (routing/encoder.py)
        # the limits of the aliases a request falls back into (routing/fallback_limits.py)
        self.fallback_gate: FallbackGate | None = None

    def _region_preference(self) -> RegionPreference:
        """The config's region preference (rebuilt when a reload swapped the config)."""
        config = self.config
        prefs = self._regions
        if prefs.local != config.region or prefs.order != config.region_failover:
            prefs = self._regions = RegionPreference(config.region, config.region_failover)
        return prefs

    def _candidates(
        self, route: AliasRoute, ctx: RouteContext, local_only: bool
    ) -> tuple[list[Deployment], bool]:
        """Deployments allowed for this hop, and whether any was dropped for its window."""
        allowed = [d for d in route.deployments if d.is_local or not local_only]
        req = ctx.request
        fitting = [
            d
            for d in allowed
            if d.fits(d.prompt_tokens(req.body, req.prompt_tokens), req.max_tokens)
        ]
        dropped = len(fitting) < len(allowed)
        if self.versions is not None and fitting:
            fitting = self.versions.narrow(route.name, fitting, ctx)
        return fitting, dropped

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

    def _finish_pick(
        self, pick: Pick, ctx: RouteContext, hooks: Sequence[DispatchHook[Deployment]]
    ) -> Pick:
        """The strategy's pick with the fields every strategy gets: the tenant's
        ``cache_salt`` (prefix-cache isolation) and the request hooks' (vLLM's ``priority``)."""
        if self.salt is not None:
            pick = self.salt.apply(pick, ctx)
        if hooks:
            pick = _with_hook_fields(hooks, pick)
        if ctx.ec_transfer and ctx.kv_transfer is None:  # a PD decode gets the KV, not these
            extra = {**(pick.extra_body or {}), "ec_transfer_params": ctx.ec_transfer}
            pick = Pick(pick.deployment, extra, pick.uncached_tokens)
        return pick

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

    @staticmethod
    def _wakeable(table: RouteTable, alias: str) -> list[Deployment]:
        """The deployments of ``alias``'s chain that may be scaled to zero or asleep."""
        return [d for route in table.chain(alias) for d in route.deployments if d.config.wake]

    async def _send_once(
        self, table: RouteTable, ctx: RouteContext, build: CallBuilder
    ) -> Dispatch:
        req = ctx.request
        chain = table.chain(req.alias)
        local_only = chain[0].local_only
        last_error: FleetgateError | None = None
        refusal: FleetgateError | None = None  # of a fallback alias
        too_long = False
        capped = False  # a hop whose every deployment was at its rpm / tpm this minute
        for hop, route in enumerate(chain):
            fitting, dropped = self._candidates(route, ctx, local_only)
            too_long = too_long or (dropped and not fitting)
            if fitting and any(d.rate_capped for d in fitting):
                fitting = _within_rate(fitting, req)
                capped = capped or not fitting
            if not fitting:
                continue
            if hop > 0:
                refused_by = await self._admit_fallback(route.name, ctx)
                if refused_by is not None:
                    refusal = refusal or refused_by
                    continue
                self._metrics.fallbacks.labels(chain[0].name, route.name).inc()
            result, error = await self._try_route(route, fitting, ctx, build)
            if result is not None:
                return result
            last_error = error or last_error
        if last_error is not None:
            raise last_error
        if too_long:
            raise ContextWindowExceeded(
                f"This request needs about {req.prompt_tokens + req.max_tokens} tokens "
                f"(prompt {req.prompt_tokens} + max_tokens {req.max_tokens}), more than the "
                f"context window of every deployment of '{req.alias}' and its fallbacks.",
                param="messages",
            )
        if capped:
            raise RateLimited(
                f"Every deployment of '{req.alias}' (and of its fallbacks) is at its requests or "
                "tokens per minute.",
                retry_after=60 - time.monotonic() % 60,
            )
        if refusal is not None:  # nothing else could serve: a direct call's refusal
            raise refusal
        raise NoHealthyDeployment(f"No deployment of '{req.alias}' can serve this request.")

    async def _admit_fallback(self, alias: str, ctx: RouteContext) -> FleetgateError | None:
        """None when the request may fall back into ``alias`` as a direct call to it could be
        made (the key is allowed the alias, its limits admit the request); else the refusal.
        An alias entered again (a retry after a wake's hold) is not counted again."""
        req = ctx.request
        if not req.principal.may_use(alias):  # the caller never learns of the alias
            return NoHealthyDeployment(f"No deployment of '{req.alias}' can serve this request.")
        if self.fallback_gate is None or alias in ctx.fallbacks:
            return None
        try:
            settle = await self.fallback_gate.admit(alias, req)
        except (ClientError, ServiceUnavailable) as exc:
            return exc
        if settle is not None:
            ctx.fallbacks[alias] = settle
        return None

    async def _prepare(
        self, route: AliasRoute, fitting: list[Deployment], ctx: RouteContext
    ) -> tuple[list[Deployment], Sequence[DispatchHook[Deployment]]]:
        """Before the picks: an alias with an encoder pool has the images encoded there first
        (only its language-model pool answers), then the strategy's ``prepare``. Returns the
        deployments that may answer and the request hooks that still apply to them."""
        hooks: Sequence[DispatchHook[Deployment]] = ctx.request.dispatch_hooks
        encoders = []
        if route.has_encoders:  # most aliases have none: no scan per request
            encoders = [d for d in fitting if ENCODER_TAG in d.config.tags]
        if encoders:
            fitting = [d for d in fitting if ENCODER_TAG not in d.config.tags]
            if fitting and self.encoder is not None:
                hooks = await self.encoder.run(route.name, encoders, ctx, hooks, self._health)
        prepare: Prepare | None = getattr(route.strategy, "prepare", None)
        if prepare is not None and fitting:
            await prepare(fitting, ctx)
        return fitting, hooks

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
        fitting, hooks = await self._prepare(route, fitting, ctx)
        if not fitting:
            return None, NoHealthyDeployment(f"'{route.name}' has only encoder deployments.")
        observer: DispatchObserver = self.observer or _NoObserver()
        regions = self._region_preference()
        attempt = -1
        free = 0  # connection refused in a failing region: retried elsewhere at no cost
        while attempt + 1 < budget + free:
            attempt += 1
            pool = _pool(fitting, tried, regions, hooks)
            if not pool:
                break
            pick = self._finish_pick(route.strategy.pick(pool, ctx), ctx, hooks)
            dep = pick.deployment
            tried.add(id(dep))
            if attempt > 0:
                await self._backoff(attempt)
            dep.state.in_flight += 1
            dep.state.last_request_at = time.monotonic()
            dep.count_rate(ctx.request.body, ctx.request.prompt_tokens)  # rpm / tpm caps
            ticket = observer.dispatched(pick, ctx)
            started = time.perf_counter()
            try:
                if dep.state.asleep and self.waker is not None:
                    await self.waker.ensure_awake(dep)
                async with admitted(hooks, dep):
                    # the engine's own fields as the gateway set them, never as the client did
                    call = sealed(build(pick), pick.extra_body)
                    response = await _send_gated(dep, call, ctx.request.gate)
            except UpstreamError as exc:
                dep.state.in_flight -= 1
                observer.finished(ticket)
                if isinstance(exc, UpstreamContextExceeded):
                    # Not the deployment's fault (no cooldown), but it cannot take this prompt:
                    # try the others, then the fallbacks, as for a prompt estimated too long.
                    fitting = [d for d in fitting if d is not dep]
                else:
                    self._health.failure(dep, exc)
                _failed_version(ctx, route.name, dep)
                if not exc.retryable:
                    raise
                last_error = exc
                fitting = self._retry_deployments(route, fitting, dep, ctx)
                if regions.active and isinstance(exc, UpstreamConnectError) and free < len(tried):
                    free += 1  # the engine is gone (refused, reset): a dying region costs no retry
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
