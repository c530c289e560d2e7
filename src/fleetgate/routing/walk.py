"""The route walk: an alias and its fallbacks, each narrowed to what one pick may choose.

The one walk both senders of a request use: fleetgate's relay (`Dispatcher.dispatch`: pick,
send, retry) and a data plane that sends itself (`Dispatcher.choose`: the picks only, for
Envoy behind ``fleetgate epp``). For each alias of the chain, in order: the deployments that
fit the prompt (local ones only when the alias says so), those a caller's filter keeps (a data
plane's subset hint), the canary split, those within their ``rpm`` / ``tpm`` this minute; for
a fallback alias the admission a direct call would get; then the encoder pools and the
strategy's ``prepare``. `RouteWalk.pick` is one attempt's pick among what is left: healthy,
not tried yet, the best region, the request hooks' preference, the strategy, then the fields
every pick gets (the tenant's ``cache_salt``, the hooks' fields, encoder transfer params).
When no alias served, `RouteWalk.failure` is the error the caller gets::

    walk = dispatcher.walk(table, ctx)
    for route in walk.chain:
        hop = await walk.enter(route)
        if hop is None:
            continue
        pick = walk.pick(hop, tried=set())
        ...
    raise walk.failure()
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetgate.contract.dispatch import DispatchHook, extra_fields, preferred
from fleetgate.errors import (
    ClientError,
    ContextWindowExceeded,
    FleetgateError,
    NoHealthyDeployment,
    RateLimited,
    ServiceUnavailable,
)
from fleetgate.routing.context import Pick, RouteContext, RoutedRequest
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.encoder import ENCODER_TAG, EncoderStep
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.regions import RegionPreference
from fleetgate.routing.salt import TenantSalt
from fleetgate.routing.table import AliasRoute, RouteTable
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["FallbackGate", "Hop", "RouteWalk", "VersionPicker", "settle_fallbacks"]

Keep = Callable[[Deployment], bool]
Prepare = Callable[[Sequence[Deployment], RouteContext], Awaitable[None]]


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


@dataclass(slots=True)
class Hop:
    """One alias of the chain, ready to pick from. ``candidates`` may be narrowed by the
    caller between attempts (a deployment that cannot take the prompt, a rollout's retry)."""

    route: AliasRoute
    candidates: list[Deployment]
    hooks: Sequence[DispatchHook[Deployment]]  # the request hooks that still apply


def settle_fallbacks(ctx: RouteContext, used: int | None, keep: str | None = None) -> None:
    """Settle the request's fallback admissions (``used``: the tokens it used there, None:
    unknown) but ``keep``'s (the alias answering)."""
    fallbacks = ctx.fallbacks
    for alias in [a for a in fallbacks if a != keep]:
        fallbacks.pop(alias)(used)


def _within_rate(fitting: list[Deployment], req: RoutedRequest) -> list[Deployment]:
    """The deployments whose ``rpm`` / ``tpm`` window may have room for ``req`` (not marked
    full by a recent refusal: `fleetgate.routing.deployment_rate`)."""
    return [d for d in fitting if d.within_rate(d.prompt_tokens(req.body, req.prompt_tokens))]


def _with_hook_fields(hooks: Sequence[DispatchHook[Deployment]], pick: Pick) -> Pick:
    """``pick`` with the hooks' extra body fields for its deployment (vLLM's ``priority``)."""
    fields = extra_fields(hooks, pick.deployment)
    if not fields:
        return pick
    return Pick(pick.deployment, {**(pick.extra_body or {}), **fields}, pick.uncached_tokens)


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
    fresh = [d for d in healthy if id(d) not in tried] if tried else healthy
    pool = fresh or healthy
    if regions.active:  # the local region while it has one, else the next region
        pool = regions.narrow(pool)
    if hooks:
        pool = preferred(hooks, pool)
    return pool


class RouteWalk:
    """One request's walk through its alias chain (see the module doc). Built by
    `fleetgate.routing.dispatch.Dispatcher.walk`; ``only`` keeps the deployments a caller
    allows (None: all)."""

    __slots__ = (
        "_capped_until",
        "_encoder",
        "_fallback_gate",
        "_health",
        "_last_error",
        "_local_only",
        "_metrics",
        "_refusal",
        "_salt",
        "_too_long",
        "_versions",
        "chain",
        "ctx",
        "only",
        "regions",
    )

    def __init__(
        self,
        table: RouteTable,
        ctx: RouteContext,
        *,
        health: HealthTracker,
        metrics: GatewayMetrics,
        regions: RegionPreference,
        versions: VersionPicker | None = None,
        salt: TenantSalt | None = None,
        encoder: EncoderStep | None = None,
        fallback_gate: FallbackGate | None = None,
        only: Keep | None = None,
    ) -> None:
        self.ctx = ctx
        self.chain: Sequence[AliasRoute] = table.chain(ctx.request.alias)
        self.only = only
        self.regions = regions
        self._health = health
        self._metrics = metrics
        self._versions = versions
        self._salt = salt
        self._encoder = encoder
        self._fallback_gate = fallback_gate
        self._local_only = self.chain[0].local_only
        self._last_error: FleetgateError | None = None
        self._refusal: FleetgateError | None = None  # of a fallback alias
        self._too_long = False
        # an alias whose every deployment was at its rpm / tpm: when the first frees room
        self._capped_until = 0.0

    async def enter(self, route: AliasRoute) -> Hop | None:
        """``route`` (an alias of `chain`, in order) narrowed for its picks; None when nothing
        of it may serve the request (`failure` says why in the end)."""
        ctx = self.ctx
        req = ctx.request
        fitting = self.candidates(route)
        if fitting and any(d.rate_capped for d in fitting):
            room = _within_rate(fitting, req)
            if not room:  # each was refused lately: the soonest frees room then
                until = min(d.state.rate_full_until for d in fitting)
                self._capped_until = min(self._capped_until or until, until)
            fitting = room
        if not fitting:
            return None
        if route is not self.chain[0]:
            refused_by = await self._admit_fallback(route.name)
            if refused_by is not None:
                self._refusal = self._refusal or refused_by
                return None
            self._metrics.fallbacks.labels(self.chain[0].name, route.name).inc()
        fitting, hooks = await self._prepare(route, fitting)
        if not fitting:
            self.failed(NoHealthyDeployment(f"'{route.name}' has only encoder deployments."))
            return None
        return Hop(route, fitting, hooks)

    def candidates(self, route: AliasRoute) -> list[Deployment]:
        """The deployments of ``route`` allowed for this request that fit its prompt, after
        the canary split (notes a prompt too long for every allowed one)."""
        allowed = route.deployments
        if self._local_only:
            allowed = [d for d in allowed if d.is_local]
        if self.only is not None:
            allowed = [d for d in allowed if self.only(d)]
        req = self.ctx.request
        fitting = [
            d
            for d in allowed
            if d.fits(d.prompt_tokens(req.body, req.prompt_tokens), req.max_tokens)
        ]
        dropped = len(fitting) < len(allowed)
        if self._versions is not None and fitting:
            fitting = self._versions.narrow(route.name, fitting, self.ctx)
        self._too_long = self._too_long or (dropped and not fitting)
        return fitting

    def pick(self, hop: Hop, tried: set[int], keep: Keep | None = None) -> Pick | None:
        """One attempt's pick among ``hop.candidates`` that ``keep`` keeps (None: all): not
        in ``tried`` while any other is left; None when none is healthy."""
        pool = _pool(hop.candidates, tried, self.regions, hop.hooks)
        if keep is not None:
            pool = [d for d in pool if keep(d)]
        if not pool:
            return None
        return self._finish(hop.route.strategy.pick(pool, self.ctx), hop.hooks)

    def _finish(self, pick: Pick, hooks: Sequence[DispatchHook[Deployment]]) -> Pick:
        """The strategy's pick with the fields every strategy gets: the tenant's
        ``cache_salt`` (prefix-cache isolation) and the request hooks' (vLLM's ``priority``)."""
        ctx = self.ctx
        if self._salt is not None:
            pick = self._salt.apply(pick, ctx)
        if hooks:
            pick = _with_hook_fields(hooks, pick)
        if ctx.ec_transfer and ctx.kv_transfer is None:  # a PD decode gets the KV, not these
            extra = {**(pick.extra_body or {}), "ec_transfer_params": ctx.ec_transfer}
            pick = Pick(pick.deployment, extra, pick.uncached_tokens)
        return pick

    def failed(self, error: FleetgateError) -> None:
        """An alias of the chain failed with ``error`` (its attempts did, or it had no pick)."""
        self._last_error = error

    def failure(self) -> FleetgateError:
        """The error when no alias of the chain served: the last attempt's, a prompt too
        long for every deployment (400), every one at its rate cap (429), a fallback's
        refusal, else no healthy deployment (503)."""
        if self._last_error is not None:
            return self._last_error
        req = self.ctx.request
        if self._too_long:
            return ContextWindowExceeded(
                f"This request needs about {req.prompt_tokens + req.max_tokens} tokens "
                f"(prompt {req.prompt_tokens} + max_tokens {req.max_tokens}), more than the "
                f"context window of every deployment of '{req.alias}' and its fallbacks.",
                param="messages",
            )
        if self._capped_until:
            return RateLimited(
                f"Every deployment of '{req.alias}' (and of its fallbacks) is at its requests or "
                "tokens per minute.",
                retry_after=max(1.0, self._capped_until - time.monotonic()),
            )
        if self._refusal is not None:  # nothing else could serve: a direct call's refusal
            return self._refusal
        return NoHealthyDeployment(f"No deployment of '{req.alias}' can serve this request.")

    async def _admit_fallback(self, alias: str) -> FleetgateError | None:
        """None when the request may fall back into ``alias`` as a direct call to it could be
        made (the key is allowed the alias, its limits admit the request); else the refusal.
        An alias entered again (a retry after a wake's hold) is not counted again."""
        ctx = self.ctx
        req = ctx.request
        if not req.principal.may_use(alias):  # the caller never learns of the alias
            return NoHealthyDeployment(f"No deployment of '{req.alias}' can serve this request.")
        if self._fallback_gate is None or alias in ctx.fallbacks:
            return None
        try:
            settle = await self._fallback_gate.admit(alias, req)
        except (ClientError, ServiceUnavailable) as exc:
            return exc
        if settle is not None:
            ctx.fallbacks[alias] = settle
        return None

    async def _prepare(
        self, route: AliasRoute, fitting: list[Deployment]
    ) -> tuple[list[Deployment], Sequence[DispatchHook[Deployment]]]:
        """Before the picks: an alias with an encoder pool has the images encoded there first
        (only its language-model pool answers), then the strategy's ``prepare``. Returns the
        deployments that may answer and the request hooks that still apply to them."""
        ctx = self.ctx
        hooks: Sequence[DispatchHook[Deployment]] = ctx.request.dispatch_hooks
        encoders = []
        if route.has_encoders:  # most aliases have none: no scan per request
            encoders = [d for d in fitting if ENCODER_TAG in d.config.tags]
        if encoders:
            fitting = [d for d in fitting if ENCODER_TAG not in d.config.tags]
            if fitting and self._encoder is not None:
                hooks = await self._encoder.run(route.name, encoders, ctx, hooks, self._health)
        prepare: Prepare | None = getattr(route.strategy, "prepare", None)
        if prepare is not None and fitting:
            await prepare(fitting, ctx)
        return fitting, hooks
