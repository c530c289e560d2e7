"""`Headroom`: whether a reservation may overlap the upstream call instead of preceding it.

A reservation refused after the upstream call was sent costs the upstream an aborted request
(the client still gets its 429 and nothing else). So the tenancy stage overlaps the two only
where a refusal is unlikely, judged from what this process last learned of the scopes:

- the last answer for the same scopes was a grant, at most ``fresh_s`` ago, and left at
  least two requests and twice this request's tokens per minute in every limited scope, after
  the reservations this process has sent since and not heard back about;
- at most ``max(1, share x that room)`` overlapped reservations of the scopes are unanswered
  at once (``share``: `OVERLAP_SHARE`, a tenth), in requests and in tokens;
- every scope with ``max_parallel`` has at most half its slots taken by this process,
  counting this request (so a one-slot key never overlaps: another replica may hold the slot);
- every budgeted scope's spend, as last seen, is under 90% of its budget.

Everything else (the first request of a key, a key near a limit, an unknown budget, a refusal
seen last) goes the serial way: reserve, then send. The counts are per process and advisory;
the limiter stays the only judge of what is admitted.

**The bound on wasted engine calls.** An overlapped reservation that is refused costs one
aborted engine call. A replica's unanswered overlapped reservations never exceed
``max(1, share x R)`` (R: the room its last grant showed, at most the key's limit), and its
first refusal sends every later request the serial way until a grant shows room again. So
one replica wastes at most ``max(1, share x limit)`` calls per refusal, and ``P`` replicas
bursting on one key together at most ``P x max(1, share x limit)``; while ``P x share < 1``
their overlapped reservations together fit in the room they saw, so only the lag of that
view (one round trip) lets any be refused. Admission itself stays exact: the limiter decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from fleetgate.limits.base import Reservation, Scope

__all__ = ["OVERLAP_SHARE", "Headroom"]

_MAX_TRACKED = 50_000  # scope sets remembered; past this, forgotten (they re-learn serially)
OVERLAP_SHARE = 0.1  # of the room last seen, the most reservations unanswered at once


@dataclass(slots=True)
class _Seen:
    at: float  # monotonic time of the last answer
    requests: int | None  # fewest requests left in any scope (None: no request limit)
    tokens: int | None  # fewest tokens left in any scope
    pending: int = 0  # overlapped reservations sent since, not answered yet
    pending_tokens: int = 0


class Headroom:
    """What this process knows of each scope set's room, for `TenancyStage`.

    ``spent(scope)``: the budgeted scope's spend as last seen, None when unknown
    (`fleetgate.tenancy.budgets.Budgets.known_spend`)."""

    def __init__(
        self,
        spent: Callable[[Scope], int | None],
        *,
        fresh_s: float = 5.0,
        share: float = OVERLAP_SHARE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spent = spent
        self.fresh_s = fresh_s
        self.share = share
        self._clock = clock
        self._seen: dict[tuple[Scope, ...], _Seen] = {}
        self._active: dict[str, int] = {}  # admitted, not settled, per parallel-limited scope

    def allows(self, scopes: tuple[Scope, ...], tokens: int) -> bool:
        """Whether a reservation of ``tokens`` in ``scopes`` may overlap the upstream call."""
        seen = self._seen.get(scopes)
        if seen is None or self._clock() - seen.at > self.fresh_s:
            return False
        pending = seen.pending
        if seen.requests is not None and (
            seen.requests - pending < 2 or (pending and pending + 1 > self.share * seen.requests)
        ):
            return False
        if seen.tokens is not None and (
            seen.tokens - seen.pending_tokens < 2 * tokens
            or (pending and seen.pending_tokens + tokens > self.share * seen.tokens)
        ):
            return False
        for s in scopes:
            if s.max_parallel is not None:
                taken = self._active.get(s.name, 0) + seen.pending + 1
                if 2 * taken > s.max_parallel:
                    return False
            if s.budget_nusd is not None:
                spent = self._spent(s)
                if spent is None or 10 * spent >= 9 * s.budget_nusd:
                    return False
        return True

    def sent(self, scopes: tuple[Scope, ...], tokens: int) -> None:
        """An overlapped reservation left (call `answered` when its answer comes)."""
        seen = self._seen.get(scopes)
        if seen is not None:
            seen.pending += 1
            seen.pending_tokens += tokens

    def answered(self, scopes: tuple[Scope, ...], tokens: int) -> None:
        seen = self._seen.get(scopes)
        if seen is not None and seen.pending > 0:
            seen.pending -= 1
            seen.pending_tokens = max(0, seen.pending_tokens - tokens)

    def granted(self, scopes: tuple[Scope, ...], reservation: Reservation) -> None:
        """A reservation was granted (either way): remember the room it left, hold its slots.
        One not enforced (Redis away, ``fail_open``) says nothing of the room: forgotten."""
        for s in scopes:
            if s.max_parallel is not None:
                self._active[s.name] = self._active.get(s.name, 0) + 1
        if not reservation.enforced:
            self._forget(scopes)
            return
        requests: int | None = None
        tokens: int | None = None
        for usage in reservation.usage:
            if usage.remaining_requests is not None:
                left = usage.remaining_requests
                requests = left if requests is None else min(requests, left)
            if usage.remaining_tokens is not None:
                left = usage.remaining_tokens
                tokens = left if tokens is None else min(tokens, left)
        seen = self._seen.get(scopes)
        if seen is None:
            if len(self._seen) >= _MAX_TRACKED:
                self._seen.clear()
            self._seen[scopes] = _Seen(self._clock(), requests, tokens)
        else:
            seen.at, seen.requests, seen.tokens = self._clock(), requests, tokens

    def refused(self, scopes: tuple[Scope, ...]) -> None:
        """A reservation was refused: the next ones go the serial way until one is granted."""
        self._forget(scopes)

    def _forget(self, scopes: tuple[Scope, ...]) -> None:
        seen = self._seen.pop(scopes, None)
        if seen is not None and seen.pending:
            # Keep counting the overlapped ones still in flight, with no room to spend.
            self._seen[scopes] = _Seen(-self.fresh_s * 2, 0, 0, seen.pending, seen.pending_tokens)

    def released(self, scopes: tuple[Scope, ...]) -> None:
        """A granted reservation was settled: its parallel slots are free again."""
        for s in scopes:
            if s.max_parallel is not None:
                left = self._active.get(s.name, 0) - 1
                if left > 0:
                    self._active[s.name] = left
                else:
                    self._active.pop(s.name, None)
