"""A fallback into another alias passes that alias's limits, as a direct call to it would.

Tenancy reserves a request in its key's, team's and alias's scopes before it is sent
(`fleetgate.tenancy.stage`); the dispatcher may then fall back to other aliases. Each alias the
request falls back into is checked as a direct call to it would be: the key must be allowed
the alias (`Principal.may_use`, checked by the dispatcher) and the alias's own limits (RPM,
TPM, parallel: ``tenancy.alias_limits``) must admit it, in the same counters as direct calls,
in process or in Redis. The key's and team's scopes (their budgets included) already hold the
request once; they are not counted twice. A refused fallback is skipped: the chain goes on,
and the client gets the original error if nothing else serves.

What a fallback reserved is settled by the dispatcher (`Dispatcher.fallback_gate`): at once,
with nothing used, for an alias that did not answer; when the request ends, with its usage,
for the alias that answered.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable
from functools import partial
from typing import Protocol

from fleetgate.errors import RateLimited
from fleetgate.limits.base import Denial, Limiter, Reservation
from fleetgate.routing.context import RoutedRequest
from fleetgate.tenancy.scopes import ScopeBook

__all__ = ["FallbackLimits"]

log = logging.getLogger("fleetgate.routing")


class _LimitsSource(Protocol):
    """What it needs of tenancy (`fleetgate.tenancy.runtime.Tenancy` is one)."""

    @property
    def limiter(self) -> Limiter: ...

    @property
    def scopes(self) -> ScopeBook: ...


class FallbackLimits:
    """The dispatcher's `fleetgate.routing.dispatch.FallbackGate` over tenancy's limiter and
    alias limits (the same counters as direct calls)."""

    def __init__(self, limiter: Limiter, scopes: ScopeBook) -> None:
        self.limiter = limiter
        self.scopes = scopes
        self._prefix = os.urandom(6).hex()
        self._ids = itertools.count(1)

    @classmethod
    def of(cls, tenancy: _LimitsSource | None) -> FallbackLimits | None:
        """The gate over ``tenancy``'s limits; None when tenancy (and so every limit) is off."""
        return None if tenancy is None else cls(tenancy.limiter, tenancy.scopes)

    async def admit(self, alias: str, req: RoutedRequest) -> Callable[[int | None], None] | None:
        """Reserve ``req`` in ``alias``'s scope. Returns the settle of the reservation (None
        when the alias has no limits); raises the refusal a direct call would get
        (`RateLimited`, or `LimiterUnavailable` when the limiter fails closed)."""
        scopes = self.scopes.scopes(None, alias)  # the alias's own scope
        if not scopes:
            return None
        # the padding of tenancy's reservation: the prompt estimate is a heuristic
        tokens = req.prompt_tokens + req.prompt_tokens // 4 + 16 + req.max_tokens
        member = f"fallback:{self._prefix}{next(self._ids):x}"
        result = await self.limiter.reserve(member, scopes, tokens)
        if isinstance(result, Denial):
            raise RateLimited(
                f"Rate limit reached for alias '{alias}' ({result.reason}).",
                retry_after=result.retry_after_ms / 1000,
            )
        return partial(self._settle, result)

    def _settle(self, reservation: Reservation, used: int | None) -> None:
        """Free the slot and true up the tokens (``used`` None: unknown, the reserved count
        stays). Sent now, so it reaches the limiter before the response is written."""
        tokens = reservation.tokens if used is None else used
        settling = asyncio.ensure_future(self.limiter.settle(reservation, tokens, 0))
        settling.add_done_callback(_settled)


def _settled(settling: asyncio.Future[dict[str, int]]) -> None:
    """A settle that failed (the limiter away) leaves the slot to its lease: the alias scope
    has no budget, so nothing else is lost."""
    if not settling.cancelled() and (exc := settling.exception()) is not None:
        log.debug("a fallback's settle failed: %s", exc)
