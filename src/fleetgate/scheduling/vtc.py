"""Virtual token counters (VTC, Sheng et al., OSDI '24): fair share of tokens between teams.

Each team has a counter of the service it received, in tokens divided by its weight: input
tokens are charged when a request is admitted, output tokens when it ends. When the pool is
saturated the scheduler admits, among the teams with queued requests, the one with the
smallest counter. A team that starts queueing has its counter lifted to the smallest counter
of the teams already queued (or, with none queued, to the counter of the team served last), so
idle time is not banked as credit. With that, two backlogged teams' counters never differ by
more than about one request's tokens per admission slot, whatever their arrival rates.

Example::

    vtc = VirtualTokenCounters()
    vtc.activate("a", backlogged=())       # "a" starts queueing
    vtc.charge("a", 120, weight=1.0)      # its request's prompt, at admission
    vtc.fairest(["a", "b"])                # "b": the smaller counter
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["VirtualTokenCounters"]


class VirtualTokenCounters:
    """Counters of one pool (no locks: one event loop)."""

    __slots__ = ("_last", "counters")

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self._last: str | None = None  # the team admitted last

    def value(self, team: str) -> float:
        return self.counters.get(team, 0.0)

    def charge(self, team: str, tokens: float, weight: float = 1.0) -> None:
        """Service given to ``team`` (``tokens`` divided by its weight)."""
        if tokens > 0:
            self.counters[team] = self.counters.get(team, 0.0) + tokens / weight

    def activate(self, team: str, backlogged: Iterable[str]) -> None:
        """``team`` starts queueing; ``backlogged``: the teams already queued (not it)."""
        floor = min((self.value(t) for t in backlogged), default=None)
        if floor is None and self._last is not None and self._last != team:
            floor = self.value(self._last)
        if floor is not None and self.value(team) < floor:
            self.counters[team] = floor

    def fairest(self, teams: Iterable[str]) -> str:
        """The team among ``teams`` (not empty) with the least service; it is remembered as
        the team served last."""
        best = min(teams, key=self.value)
        self._last = best
        return best

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the counters of teams not in ``keep`` (bounded memory; they restart lifted)."""
        kept = set(keep)
        if self._last is not None:
            kept.add(self._last)
        for team in [t for t in self.counters if t not in kept]:
            del self.counters[team]
