"""The limiter interface: reserve before the upstream call, settle after it.

A request is checked against several `Scope` s at once (its key, its team, its alias); each
scope may carry requests per minute, tokens per minute, parallel requests and a budget. Windows
are sliding 60-second logs, so "120 RPM" means at most 120 admissions in any 60 seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["FOREVER_MS", "Denial", "Limiter", "Reservation", "Scope", "ScopeUsage", "WINDOW_MS"]

WINDOW_MS = 60_000
LEASE_MS = 15 * 60_000  # a parallel slot whose settle never came is freed after this
FOREVER_MS = 7_258_118_400_000  # 2200-01-01: the end of a budget that never resets


@dataclass(frozen=True, slots=True)
class Scope:
    """One limited thing, e.g. ``key:k1``; ``None`` limits are not checked."""

    name: str
    rpm: int | None = None
    tpm: int | None = None
    max_parallel: int | None = None
    budget_nusd: int | None = None
    period_start_ms: int = 0
    period_end_ms: int = FOREVER_MS

    @property
    def budget_key(self) -> str:
        return f"{self.name}:{self.period_start_ms}"


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    """Remaining requests and tokens of a scope after a reservation, for headers."""

    remaining_requests: int | None
    remaining_tokens: int | None
    reset_requests_ms: int
    reset_tokens_ms: int


@dataclass(frozen=True, slots=True)
class Denial:
    """Why a reservation was refused."""

    scope: str
    reason: str  # "requests" | "tokens" | "parallel" | "budget"
    retry_after_ms: int
    usage: ScopeUsage | None = None


@dataclass(slots=True)
class Reservation:
    """A granted reservation; hand it back to ``settle`` exactly once."""

    member: str
    scopes: tuple[Scope, ...]
    tokens: int
    enforced: bool = True
    usage: list[ScopeUsage] = field(default_factory=list)
    # A parallel-limited scope was more than half full with this request (or nobody said):
    # its settle must reach the store before the client has the answer, as the client's next
    # request (on any replica) may need the slot. False: the settle may leave just after.
    crowded: bool = True


class Limiter(Protocol):
    """Reserve and settle; implementations: `MemoryLimiter`, `RedisLimiter`."""

    async def reserve(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> Reservation | Denial:
        """Admit the request in every scope at once, or refuse without counting it."""
        ...

    def reserve_sent(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> asyncio.Future[Reservation | Denial] | None:
        """`reserve`, sent to the shared store with this loop turn's writes and answered by
        the returned future, so the caller can do other work during the round trip (the tenancy
        stage sends the upstream call meanwhile). The future may fail like `reserve`
        (`LimiterUnavailable`). None when there is no round trip to overlap (an in-process
        limiter) or the command cannot leave this way (not connected, too many waiting, the
        store marked down): call `reserve`."""
        ...

    def settle(
        self, reservation: Reservation, tokens: int, cost_nusd: int
    ) -> Awaitable[dict[str, int]]:
        """Free the parallel slot, replace reserved tokens by ``tokens``, add the cost to the
        budgeted scopes; resolves to each budgeted scope's spend after the increment. Raises
        `fleetgate.errors.LimiterUnavailable` when the shared store cannot be reached: settling
        again later is safe (with ``cost_nusd=0`` when the error says it may have applied).
        An ``async def`` fits; an implementation may also return an `asyncio.Future` (then
        `fleetgate.tenancy.settles.Settles` waits for it without a task of its own)."""
        ...

    async def spent(self, scope: Scope) -> int | None:
        """The spend counted this period for ``scope`` (None when unknown)."""
        ...

    async def raise_spend(self, scope: Scope, nusd: int) -> None:
        """Make the period's counter at least ``nusd`` (the store's total): never lowers it."""
        ...

    def generation(self) -> int:
        """Changes whenever the counters may have missed spend (an outage, a reconnection to a
        possibly restarted store): the owner then raises them to the store's totals again."""
        ...

    async def aclose(self) -> None: ...
