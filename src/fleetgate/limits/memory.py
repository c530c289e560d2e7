"""`MemoryLimiter`: exact limits for one process (the embedded default).

The windows are exact sliding 60-second logs, as in `RedisLimiter`, but a log holds one slot per
millisecond that admitted something (its request count and tokens), not one entry per request:
the clock's resolution is a millisecond, so nothing is lost, and a scope's memory is bounded by
the window (at most 60,000 slots) however many requests it admits. Per request only what is
still in flight is remembered (for its settle and its parallel slot). A scope keeps only the
logs of the limits it has, and a scope idle for a whole window is forgotten.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetgate.limits.base import LEASE_MS, WINDOW_MS, Denial, Reservation, Scope, ScopeUsage

__all__ = ["MemoryLimiter"]


@dataclass(slots=True)
class _InFlight:
    admitted_ms: int  # the log slot that holds its tokens
    tokens: int  # tokens it holds in that slot
    lease_until_ms: int  # its parallel slot is freed then if no settle came


@dataclass(slots=True)
class _Window:
    times: deque[int] = field(default_factory=deque)  # admitting milliseconds, oldest first
    counts: deque[int] = field(default_factory=deque)  # admissions at each of ``times``
    slot_tokens: dict[int, int] = field(default_factory=dict)  # millisecond -> tokens held
    requests: int = 0
    token_total: int = 0
    in_flight: OrderedDict[str, _InFlight] = field(default_factory=OrderedDict)

    def trim(self, now: int) -> None:
        edge = now - WINDOW_MS
        times, counts = self.times, self.counts
        while times and times[0] <= edge:
            self.requests -= counts.popleft()
            self.token_total -= self.slot_tokens.pop(times.popleft(), 0)
        flights = self.in_flight
        while flights and next(iter(flights.values())).lease_until_ms <= now:
            flights.popitem(last=False)

    def admit(self, member: str, now: int, tokens: int, s: Scope) -> None:
        if s.rpm is not None or s.tpm is not None:
            if self.times and self.times[-1] >= now:
                now = self.times[-1]  # same millisecond (or the clock stepped back): one slot
                self.counts[-1] += 1
            else:
                self.times.append(now)
                self.counts.append(1)
            self.requests += 1
            if s.tpm is not None:
                self.slot_tokens[now] = self.slot_tokens.get(now, 0) + tokens
                self.token_total += tokens
        if s.tpm is not None or s.max_parallel is not None:
            held = tokens if s.tpm is not None else 0
            self.in_flight[member] = _InFlight(now, held, now + LEASE_MS)

    def release(self, member: str, tokens: int) -> None:
        flight = self.in_flight.pop(member, None)
        if flight is None or flight.admitted_ms not in self.slot_tokens:
            return  # settled already, or its tokens have left the window
        self.slot_tokens[flight.admitted_ms] += tokens - flight.tokens
        self.token_total += tokens - flight.tokens

    def empty(self) -> bool:
        return not self.times and not self.in_flight


class MemoryLimiter:
    """Sliding-window limits held in this process; see `fleetgate.limits.base.Limiter`."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._spend: dict[str, int] = {}  # budget_key -> nano-USD this period
        self._spend_ends: dict[str, int] = {}  # budget_key -> the period's end (ms)
        self._swept_ms = 0

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _sweep(self, now: int) -> None:
        """Once a window: forget the scopes with nothing in their window and nothing in flight."""
        if now - self._swept_ms < WINDOW_MS:
            return
        self._swept_ms = now
        for w in self._windows.values():
            w.trim(now)
        # a new dict: one that only had entries deleted keeps its table at its largest size
        self._windows = {name: w for name, w in self._windows.items() if not w.empty()}
        # and the spend of budget periods that have ended (a new period starts a new key)
        if any(end <= now for end in self._spend_ends.values()):
            self._spend_ends = {k: end for k, end in self._spend_ends.items() if end > now}
            self._spend = {k: v for k, v in self._spend.items() if k in self._spend_ends}

    def _check(self, s: Scope, w: _Window, tokens: int, now: int) -> Denial | ScopeUsage:
        reset = w.times[0] + WINDOW_MS - now if w.times else 0
        if s.rpm is not None and w.requests + 1 > s.rpm:
            return Denial(s.name, "requests", max(reset, 1))
        if s.tpm is not None and w.token_total + tokens > s.tpm:
            return Denial(s.name, "tokens", max(reset, 1))
        if s.max_parallel is not None and len(w.in_flight) >= s.max_parallel:
            return Denial(s.name, "parallel", 1000)
        if s.budget_nusd is not None and self._spend.get(s.budget_key, 0) >= s.budget_nusd:
            return Denial(s.name, "budget", max(s.period_end_ms - now, 1000))
        return ScopeUsage(
            None if s.rpm is None else s.rpm - w.requests - 1,
            None if s.tpm is None else s.tpm - w.token_total - tokens,
            reset or WINDOW_MS,
            reset or WINDOW_MS,
        )

    async def reserve(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> Reservation | Denial:
        now = self._now()
        self._sweep(now)
        usage: list[ScopeUsage] = []
        windows = []
        for s in scopes:
            w = self._windows.get(s.name)
            if w is None:
                w = _Window()
                if s.rpm is not None or s.tpm is not None or s.max_parallel is not None:
                    self._windows[s.name] = w  # a budget-only scope keeps no window
            w.trim(now)
            checked = self._check(s, w, tokens, now)
            if isinstance(checked, Denial):
                return checked
            usage.append(checked)
            windows.append(w)
        for s, w in zip(scopes, windows, strict=True):
            w.admit(member, now, tokens, s)
        # crowded=False: one process holds the counters, and the settle (a task started when
        # the request ends) runs before this process can read the client's next request
        return Reservation(member, scopes, tokens, True, usage, crowded=False)

    def reserve_sent(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> asyncio.Future[Reservation | Denial] | None:
        """None: an in-process reservation has no round trip to overlap."""
        return None

    async def settle(self, reservation: Reservation, tokens: int, cost_nusd: int) -> dict[str, int]:
        totals: dict[str, int] = {}
        for s in reservation.scopes:
            w = self._windows.get(s.name)
            if w is not None:
                w.release(reservation.member, tokens)
            if s.budget_nusd is not None:
                key = s.budget_key
                self._spend[key] = self._spend.get(key, 0) + cost_nusd
                self._spend_ends[key] = s.period_end_ms
                totals[s.name] = self._spend[key]
        return totals

    async def spent(self, scope: Scope) -> int | None:
        return self._spend.get(scope.budget_key, 0)

    async def raise_spend(self, scope: Scope, nusd: int) -> None:
        key = scope.budget_key
        self._spend[key] = max(self._spend.get(key, 0), nusd)
        self._spend_ends[key] = scope.period_end_ms

    def generation(self) -> int:
        return 0  # in-process counters miss nothing

    async def aclose(self) -> None:
        self._windows.clear()
