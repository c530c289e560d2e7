"""What the cost scraper saw, per pool, over a sliding window: one `PoolTick` per scrape.

A tick stands for the time since the pool's previous tick, at most three scrape intervals (a
longer gap, a failed scrape or a restart, is not counted as observed time rather than guessed).

Example::

    ledger = CostLedger(window_s=86400)
    ledger.add("chat", samples, engine_inflight=3.0, at=time.time(), interval_s=15, idle_pct=5)
    ledger.ticks("chat", since=time.time() - 3600)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from fleetgate.cost.dcgm import GpuSample

__all__ = ["CostLedger", "PoolTick"]


@dataclass(frozen=True, slots=True)
class PoolTick:
    """One scrape of one pool's GPUs (and its engines' requests in flight)."""

    at: float  # wall-clock seconds
    dt: float  # seconds of observation this tick stands for
    gpus: int
    busy: float  # sum of utilisation / 100: GPU-equivalents busy
    idle_gpus: int  # GPUs under the idle threshold
    fb_used_fraction: float | None
    engine_inflight: float | None  # running + waiting on the pool's engines; None: unknown


class CostLedger:
    """Ticks per pool inside ``window_s``, plus the last GPU samples of each pool."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._ticks: dict[str, deque[PoolTick]] = {}
        self._prev: dict[str, float] = {}
        self.last: dict[str, list[GpuSample]] = {}

    def add(
        self,
        pool: str,
        samples: Sequence[GpuSample],
        *,
        engine_inflight: float | None,
        at: float,
        interval_s: float,
        idle_pct: float,
    ) -> PoolTick:
        prev = self._prev.get(pool)
        dt = interval_s if prev is None else min(max(0.0, at - prev), 3 * interval_s)
        self._prev[pool] = at
        utils = [s.util_pct for s in samples if s.util_pct is not None]
        fb = [(s.fb_used_mib, s.fb_free_mib) for s in samples
              if s.fb_used_mib is not None and s.fb_free_mib is not None]  # fmt: skip
        used = sum(u for u, _ in fb)
        total = sum(u + f for u, f in fb)
        tick = PoolTick(
            at=at,
            dt=dt,
            gpus=len(samples),
            busy=sum(utils) / 100.0,
            idle_gpus=sum(1 for u in utils if u < idle_pct),
            fb_used_fraction=used / total if total > 0 else None,
            engine_inflight=engine_inflight,
        )
        ticks = self._ticks.setdefault(pool, deque())
        ticks.append(tick)
        while ticks and ticks[0].at < at - self.window_s:
            ticks.popleft()
        self.last[pool] = list(samples)
        return tick

    def ticks(self, pool: str, since: float) -> list[PoolTick]:
        return [t for t in self._ticks.get(pool, ()) if t.at >= since]

    def forget(self, keep: set[str]) -> None:
        """Drop pools no longer configured."""
        for pool in set(self._ticks) - keep:
            self._ticks.pop(pool, None)
            self._prev.pop(pool, None)
            self.last.pop(pool, None)
