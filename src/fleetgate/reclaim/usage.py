"""Utilisation per pool over a sliding window, and traffic per alias across the replicas.

`UsageWindow` keeps one sample per pool and sample interval: the utilisation in percent
(DCGM's GPU utilisation when the pool names exporters, else 100 when the engine had requests
running or waiting or any gateway replica had one in flight to it, 0 otherwise: a GPU serving
one request is busy, so the busy share of the time approximates DCGM's figure). A pool's
utilisation is the time-weighted mean of its samples inside the window; it is *observed* for
as long as its samples reach back (a reclaim waits for a whole window). A state change of the
pool (reclaimed, woken) starts its window again.

`Traffic` is when each alias and pool last had a request, here and on the other replicas (each
publishes its own, `fleetgate.reclaim.reclaimer`).

Example::

    usage = UsageWindow()
    usage.add("chat-a", util_pct=0.0, at=time.time(), interval_s=5)
    usage.mean("chat-a", since=time.time() - 1800)   # (0.0, observed seconds)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Traffic", "UsageWindow"]


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float  # wall-clock seconds
    dt: float  # seconds it stands for
    util_pct: float


class UsageWindow:
    """Samples per pool, kept for ``keep_s`` seconds."""

    def __init__(self, keep_s: float = 3600.0) -> None:
        self.keep_s = keep_s
        self._samples: dict[str, deque[_Sample]] = {}

    def add(self, pool: str, *, util_pct: float, at: float, interval_s: float) -> None:
        samples = self._samples.setdefault(pool, deque())
        prev = samples[-1].at if samples else None
        # a gap (a stalled loop, a restart) is not observed time: at most three intervals
        dt = interval_s if prev is None else min(max(0.0, at - prev), 3 * interval_s)
        samples.append(_Sample(at, dt, util_pct))
        while samples and samples[0].at < at - self.keep_s:
            samples.popleft()

    def mean(self, pool: str, since: float) -> tuple[float | None, float]:
        """(time-weighted utilisation %, seconds observed) of the samples after ``since``."""
        inside = [s for s in self._samples.get(pool, ()) if s.at > since]
        observed = sum(s.dt for s in inside)
        if observed <= 0:
            return None, 0.0
        return sum(s.util_pct * s.dt for s in inside) / observed, observed

    def span(self, pool: str, now: float) -> float:
        """Seconds from the start of ``pool``'s oldest sample kept until ``now``."""
        samples = self._samples.get(pool)
        if not samples:
            return 0.0
        return now - samples[0].at + samples[0].dt

    def restart(self, pool: str) -> None:
        """Forget ``pool``'s samples: its window starts again."""
        self._samples.pop(pool, None)

    def forget(self, keep: set[str]) -> None:
        for pool in set(self._samples) - keep:
            del self._samples[pool]


@dataclass
class Traffic:
    """Wall-clock times of the last request per alias and per pool, this replica's and the
    others' (as they last published them)."""

    aliases: dict[str, float] = field(default_factory=dict)
    pools: dict[str, float] = field(default_factory=dict)
    remote: dict[str, dict[str, Any]] = field(default_factory=dict)  # replica -> its body

    def alias_seen(self, alias: str, at: float) -> None:
        self.aliases[alias] = max(at, self.aliases.get(alias, 0.0))

    def pool_seen(self, pool: str, at: float) -> None:
        self.pools[pool] = max(at, self.pools.get(pool, 0.0))

    def last(self, kind: str, name: str) -> float:
        """The latest request of alias or pool ``name`` (``kind``: "aliases" or "pools") seen
        by any replica; 0 when none."""
        here = (self.aliases if kind == "aliases" else self.pools).get(name, 0.0)
        there = [r.get(kind, {}).get(name, 0.0) for r in self.remote.values()]
        return max([here, *(float(t) for t in there if isinstance(t, int | float))])

    def body(self, at: float, in_flight: dict[str, int]) -> dict[str, object]:
        """What this replica publishes."""
        return {"at": at, "aliases": dict(self.aliases), "pools": dict(self.pools),
                "in_flight": dict(in_flight)}  # fmt: skip
