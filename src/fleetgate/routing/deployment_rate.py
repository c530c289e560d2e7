"""Per-deployment ``rpm`` / ``tpm`` (LiteLLM's deployment caps), counted for the whole fleet.

A deployment's caps are a scope of the request limiter (`fleetgate.limits`): tenancy's when it
is on, so with Redis configured every replica and worker counts in the same sliding 60-second
windows, exactly (one atomic script per attempt); in process otherwise, or with tenancy off.

Before each attempt to a capped deployment the dispatcher takes the request there
(`DeploymentRates.take`): its requests, and its tokens as the deployment counts its prompt plus
the ``max_tokens`` asked for. A deployment with no room is passed over for the alias's others,
then the fallbacks; when none has room the client gets 429 with Retry-After. After the answer
the hold is settled with what the request used, prompt and completion (`RateHold.settle`), as a
key's ``tpm`` is, so ``tpm`` counts output tokens too.

A refusal also marks the deployment full in this process until the window frees room
(`DeploymentState.rate_full_until`): the next requests pass it over without a round trip. That
mark is only a hint; the limiter's answer decides.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import time
from typing import Any, Protocol

from fleetgate.errors import RateLimited
from fleetgate.limits.base import Denial, Limiter, Reservation, Scope
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.routing.context import Usage
from fleetgate.routing.deployment import Deployment, deployment_key

__all__ = ["NO_HOLD", "DeploymentRates", "RateHold", "RatedRequest", "rate_scope"]

log = logging.getLogger("fleetgate.routing")


class RatedRequest(Protocol):
    """What the caps read of a request (`fleetgate.routing.context.RoutedRequest` is one)."""

    @property
    def body(self) -> dict[str, Any]: ...

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def outcome(self) -> Usage: ...


class _LimiterSource(Protocol):
    """What it needs of tenancy (`fleetgate.tenancy.runtime.Tenancy` is one)."""

    @property
    def limiter(self) -> Limiter: ...


def rate_scope(dep: Deployment) -> Scope:
    """The limiter scope of ``dep``'s caps: named by its identity (upstream, model, version,
    name), so every replica with the same config counts in the same place."""
    digest = hashlib.sha256(deployment_key(dep.config).encode()).hexdigest()[:20]
    return Scope(f"deployment:{digest}", rpm=dep.config.rpm, tpm=dep.config.tpm)


class RateHold:
    """A request taken into a deployment's window; `settle` it exactly once, when the answer
    ended (or the attempt failed)."""

    __slots__ = ("_limiter", "_prompt", "_req", "_reservation")

    def __init__(
        self, limiter: Limiter, reservation: Reservation | None, req: RatedRequest, prompt: int
    ) -> None:
        self._limiter = limiter
        self._reservation: Reservation | None = reservation
        self._req = req
        self._prompt = prompt

    def settle(self) -> None:
        """Replace the tokens held by what the request used (the outcome's prompt and
        completion tokens; the prompt as the deployment counted it when nothing was counted:
        a failed attempt sent its prompt). Sent now; a second call does nothing."""
        reservation, self._reservation = self._reservation, None
        if reservation is None:
            return
        outcome = self._req.outcome
        used = outcome.prompt_tokens + outcome.completion_tokens
        settling = asyncio.ensure_future(self._limiter.settle(reservation, used or self._prompt, 0))
        settling.add_done_callback(_settled)


class _NoHold(RateHold):
    """What an attempt to a deployment without caps holds: nothing to settle."""

    __slots__ = ()

    def __init__(self) -> None:
        self._reservation = None

    def settle(self) -> None:
        return None


NO_HOLD: RateHold = _NoHold()
"""The hold of an attempt to a deployment without ``rpm`` / ``tpm`` (one serves all)."""


def _settled(settling: asyncio.Future[dict[str, int]]) -> None:
    """A settle that failed (the limiter away) leaves the reserved tokens in the window: the
    scope has no budget and no parallel slot, so the cap errs on the safe side."""
    if not settling.cancelled() and (exc := settling.exception()) is not None:
        log.debug("a deployment rate settle failed: %s", exc)


class DeploymentRates:
    """Takes requests into capped deployments' windows (see the module doc)."""

    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter
        self._prefix = os.urandom(6).hex()  # members unique across replicas
        self._ids = itertools.count(1)

    @classmethod
    def of(cls, tenancy: _LimiterSource | None, shared: Limiter | None = None) -> DeploymentRates:
        """Over tenancy's limiter (Redis when configured: fleet-wide); with tenancy off, over
        ``shared`` (a Redis limiter of its own where Redis is configured: still fleet-wide),
        else in process."""
        if tenancy is not None:
            return cls(tenancy.limiter)
        return cls(MemoryLimiter() if shared is None else shared)

    async def take(self, dep: Deployment, req: RatedRequest) -> RateHold | RateLimited:
        """Take ``req`` into ``dep``'s window: the hold to settle after the answer, or the
        refusal (429, Retry-After when the window frees room) when it is full. Raises
        `fleetgate.errors.LimiterUnavailable` as the limiter's failure policy says."""
        prompt = dep.prompt_tokens(req.body, req.prompt_tokens)
        tokens = prompt + max(req.max_tokens, 0)
        member = f"dep:{self._prefix}{next(self._ids):x}"
        result = await self.limiter.reserve(member, (rate_scope(dep),), tokens)
        if isinstance(result, Denial):
            retry_after = result.retry_after_ms / 1000
            dep.state.rate_full(time.monotonic() + retry_after, prompt, result.reason)
            return RateLimited(
                f"Deployment '{dep.id}' of '{dep.alias}' is at its "
                f"{'tokens' if result.reason == 'tokens' else 'requests'} per minute.",
                retry_after=retry_after,
            )
        return RateHold(self.limiter, result, req, prompt)
