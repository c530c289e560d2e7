"""The admission queue of one pool: by band (strictly), then by team (virtual token counters).

A `Waiter` is one queued request: its policy, its prompt tokens and a future the scheduler
resolves when it is admitted (or fails when it is shed). `AdmissionQueue.next` gives the
waiter to admit next: the highest band with anyone waiting; within it the team with the least
service (`VirtualTokenCounters`); within the team, the oldest request. `AdmissionQueue.evict`
takes the newest waiter of the lowest band below a given one: what a higher band preempts when
the queue is full.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetgate.scheduling.config import BANDS
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.state import FairShare

__all__ = ["AdmissionQueue", "Waiter"]


@dataclass(eq=False, slots=True)
class Waiter:
    """One queued request."""

    policy: RequestPolicy
    tokens: int  # prompt tokens, charged at admission
    enqueued: float  # time.monotonic()
    future: asyncio.Future[None] = field(repr=False)
    seq: int = 0  # arrival order within the pool
    ahead: int = 0  # waiters ahead of it (same band or higher) when it was queued

    @property
    def team(self) -> str:
        return self.policy.team

    @property
    def rank(self) -> int:
        return self.policy.rank


class AdmissionQueue:
    """Waiters of one pool; the counters of its teams are ``vtc``."""

    __slots__ = ("_bands", "_seq", "size", "vtc")

    def __init__(self, vtc: FairShare) -> None:
        self.vtc = vtc
        # Per band (index = rank), per team, its waiters oldest first.
        self._bands: list[dict[str, deque[Waiter]]] = [{} for _ in BANDS]
        self.size = 0
        self._seq = 0

    def _backlogged(self) -> set[str]:
        return {team for band in self._bands for team in band}

    def push(self, waiter: Waiter) -> None:
        """Queue ``waiter``; its team's counter is lifted if it was not queued already."""
        backlogged = self._backlogged()
        if waiter.team not in backlogged:
            self.vtc.activate(waiter.team, backlogged)
        self._seq += 1
        waiter.seq = self._seq
        self._bands[waiter.rank].setdefault(waiter.team, deque()).append(waiter)
        self.size += 1

    def peek(self) -> Waiter | None:
        """The waiter `pop` would return, without choosing it."""
        for band in self._bands:
            if band:
                team = min(band, key=self.vtc.value)
                return band[team][0]
        return None

    def pop(self) -> Waiter | None:
        """The next waiter to admit, out of the queue."""
        for band in self._bands:
            if band:
                team = self.vtc.fairest(band)
                return self._take(band, team, 0)
        return None

    def choose(
        self, classify: Callable[[str, int], int | None], remember: bool = True
    ) -> Waiter | None:
        """The next waiter when quotas apply, left in the queue: in the highest band with a
        team ``classify(team, rank)`` does not hold back (None), the team with the least
        (class, counter), its oldest request; the team is remembered as served last."""
        value = self.vtc.value
        for rank, band in enumerate(self._bands):
            best: str | None = None
            best_key: tuple[int, float] | None = None
            for team in band:
                cls = classify(team, rank)
                if cls is None:
                    continue
                key = (cls, value(team))
                if best_key is None or key < best_key:
                    best, best_key = team, key
            if best is not None:
                if remember:
                    self.vtc.fairest((best,))
                return band[best][0]
        return None

    def _take(self, band: dict[str, deque[Waiter]], team: str, index: int) -> Waiter:
        waiters = band[team]
        waiter = waiters[index]
        del waiters[index]
        if not waiters:
            del band[team]
        self.size -= 1
        return waiter

    def remove(self, waiter: Waiter) -> bool:
        """Take ``waiter`` out (it timed out or went away); False when it is not queued."""
        band = self._bands[waiter.rank]
        waiters = band.get(waiter.team)
        if waiters is None:
            return False
        try:
            index = waiters.index(waiter)
        except ValueError:
            return False
        self._take(band, waiter.team, index)
        return True

    def evict(self, above_rank: int) -> Waiter | None:
        """The newest waiter of the lowest band ranked below ``above_rank``, out of the queue;
        None when every waiter is of that band or higher."""
        for rank in range(len(self._bands) - 1, above_rank, -1):
            band = self._bands[rank]
            if band:
                team = max(band, key=lambda t: band[t][-1].seq)
                return self._take(band, team, len(band[team]) - 1)
        return None

    def ahead_of(self, rank: int) -> int:
        """Waiters that would be admitted before a new one of band ``rank``."""
        return sum(len(w) for band in self._bands[: rank + 1] for w in band.values())

    def depth(self) -> list[int]:
        """Waiters per band, highest band first."""
        return [sum(len(w) for w in band.values()) for band in self._bands]

    def teams(self) -> dict[str, int]:
        """Waiters per team."""
        out: dict[str, int] = {}
        for band in self._bands:
            for team, waiters in band.items():
                out[team] = out.get(team, 0) + len(waiters)
        return out

    def oldest(self) -> float | None:
        """When the longest-waiting request was queued (time.monotonic())."""
        heads = [w[0].enqueued for band in self._bands for w in band.values()]
        return min(heads, default=None)

    def waiters(self) -> list[Waiter]:
        return [x for band in self._bands for w in band.values() for x in w]
