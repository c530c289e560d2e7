"""`MemoryLimiter`: exact limits for one process (the embedded default)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetgate.limits.base import LEASE_MS, WINDOW_MS, Denial, Reservation, Scope, ScopeUsage

__all__ = ["MemoryLimiter"]


@dataclass(slots=True)
class _Window:
    requests: deque[tuple[int, str]] = field(default_factory=deque)
    tokens: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)
    token_total: int = 0
    parallel: dict[str, int] = field(default_factory=dict)  # member -> lease expiry

    def trim(self, now: int) -> None:
        edge = now - WINDOW_MS
        while self.requests and self.requests[0][0] <= edge:
            self.requests.popleft()
        while self.tokens:
            member, (ts, n) = next(iter(self.tokens.items()))
            if ts > edge:
                break
            del self.tokens[member]
            self.token_total -= n
        for member in [m for m, exp in self.parallel.items() if exp <= now]:
            del self.parallel[member]


class MemoryLimiter:
    """Sliding-window limits held in this process; see `fleetgate.limits.base.Limiter`."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._spend: dict[str, int] = {}

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _check(self, s: Scope, w: _Window, tokens: int, now: int) -> Denial | ScopeUsage:
        reset_rq = w.requests[0][0] + WINDOW_MS - now if w.requests else 0
        first_tok = next(iter(w.tokens.values()), None)
        reset_tk = first_tok[0] + WINDOW_MS - now if first_tok else 0
        if s.rpm is not None and len(w.requests) + 1 > s.rpm:
            return Denial(s.name, "requests", max(reset_rq, 1))
        if s.tpm is not None and w.token_total + tokens > s.tpm:
            return Denial(s.name, "tokens", max(reset_tk, 1))
        if s.max_parallel is not None and len(w.parallel) >= s.max_parallel:
            return Denial(s.name, "parallel", 1000)
        if s.budget_nusd is not None and self._spend.get(s.budget_key, 0) >= s.budget_nusd:
            return Denial(s.name, "budget", max(s.period_end_ms - now, 1000))
        return ScopeUsage(
            None if s.rpm is None else s.rpm - len(w.requests) - 1,
            None if s.tpm is None else s.tpm - w.token_total - tokens,
            reset_rq or WINDOW_MS,
            reset_tk or WINDOW_MS,
        )

    async def reserve(
        self, member: str, scopes: tuple[Scope, ...], tokens: int
    ) -> Reservation | Denial:
        now = self._now()
        usage: list[ScopeUsage] = []
        windows = []
        for s in scopes:
            w = self._windows.setdefault(s.name, _Window())
            w.trim(now)
            checked = self._check(s, w, tokens, now)
            if isinstance(checked, Denial):
                return checked
            usage.append(checked)
            windows.append(w)
        for w in windows:
            w.requests.append((now, member))
            w.tokens[member] = (now, tokens)
            w.token_total += tokens
            w.parallel[member] = now + LEASE_MS
        return Reservation(member, scopes, tokens, True, usage)

    async def settle(self, reservation: Reservation, tokens: int, cost_nusd: int) -> dict[str, int]:
        totals: dict[str, int] = {}
        for s in reservation.scopes:
            w = self._windows.get(s.name)
            if w is not None:
                w.parallel.pop(reservation.member, None)
                held = w.tokens.get(reservation.member)
                if held is not None:
                    w.tokens[reservation.member] = (held[0], tokens)
                    w.token_total += tokens - held[1]
            if s.budget_nusd is not None:
                key = s.budget_key
                self._spend[key] = self._spend.get(key, 0) + cost_nusd
                totals[s.name] = self._spend[key]
        return totals

    async def spent(self, scope: Scope) -> int | None:
        return self._spend.get(scope.budget_key, 0)

    async def raise_spend(self, scope: Scope, nusd: int) -> None:
        key = scope.budget_key
        self._spend[key] = max(self._spend.get(key, 0), nusd)

    def generation(self) -> int:
        return 0  # in-process counters miss nothing

    async def aclose(self) -> None:
        self._windows.clear()
