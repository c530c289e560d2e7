"""The seam for admission state: what a pool's admissions count, behind one interface.

Admission into a pool decides by three counts: the requests in flight (the pool's and each
team's), the quota tree's usage (requests in flight and tokens/s per team and org) and the
teams' virtual token counters (the fair share). `AdmissionState` is that state for one pool;
`LocalState` keeps it in this process (each replica admits into its own share). Everything
else of a pool stays in the process that owns it: its queue (futures of this event loop), its
streams in flight, its limit as read from its engines, its pacing.

Sharing the state between replicas is `fleetgate.scheduling.fleet_state.FleetState` (in
Redis), handed to the scheduler (``Scheduler(..., states=...)``). Its methods are synchronous
on purpose: the fast path admits with no await, so the shared implementation answers from its
own view of the counts (``admitted``, ``teams``: the fleet's as last synced plus this
process's since) and from a *lease* (``lease``: the slots of the pool this process may fill),
and reconciles both with Redis outside the request path.

Example::

    state = LocalState(time.monotonic)
    state.configure(config)            # builds the quota tree when a team or org has a quota
    state.take("team-a")               # one more request of team-a in flight
    state.vtc.charge("team-a", 120, weight=1.0)
    state.give_back("team-a")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from fleetgate.scheduling.config import SchedulingConfig
from fleetgate.scheduling.quota import QuotaNode, QuotaTree
from fleetgate.scheduling.vtc import VirtualTokenCounters

__all__ = [
    "AdmissionState",
    "FairShare",
    "LocalState",
    "PoolStates",
    "QuotaLedger",
    "StateLink",
    "add_one",
    "drop_one",
    "quota_tree_holding",
]


class FairShare(Protocol):
    """The teams' virtual token counters of one pool (`VirtualTokenCounters`)."""

    @property
    def counters(self) -> Mapping[str, float]:
        """Every team's counter (the teams it remembers)."""
        ...

    def value(self, team: str) -> float: ...

    def charge(self, team: str, tokens: float, weight: float = 1.0) -> None: ...

    def activate(self, team: str, backlogged: Iterable[str]) -> None: ...

    def fairest(self, teams: Iterable[str]) -> str: ...

    def forget(self, keep: Iterable[str]) -> None: ...


class QuotaLedger(Protocol):
    """The quota tree of one pool: usage per node and the status of a team (`QuotaTree`)."""

    def take(self, team: str) -> None: ...

    def give_back(self, team: str) -> None: ...

    def charge(self, team: str, tokens: float) -> None: ...

    def status(self, team: str, extra: int = 1) -> int:
        """`quota.UNDER`, `quota.BORROWING` or `quota.CAPPED` with ``extra`` more in flight."""
        ...

    def reserved_for(self, team: str) -> int: ...

    def unused_nominal(self, team: str) -> int:
        """Requests ``team`` may still start within its concurrency nominal (0: none)."""
        ...

    def chain(self, team: str) -> tuple[QuotaNode, ...]: ...

    def usage(self) -> dict[str, dict[str, float]]: ...


class AdmissionState(Protocol):
    """The counts one pool's admission decides by (see the module doc)."""

    admitted: int  # requests admitted and not yet finished (a fleet's: every process's)

    @property
    def own(self) -> int:
        """Of those, this process's."""
        ...

    @property
    def lease(self) -> int | None:
        """Slots this process may fill now (None: the pool's limit alone decides)."""
        ...

    @property
    def queued_elsewhere(self) -> int:
        """Requests of the pool queued in other processes (as last synced)."""
        ...

    @property
    def critical_elsewhere(self) -> float | None:
        """When (this process's clock) a critical request last arrived at another process
        of the pool, as last synced (None: none, or alone)."""
        ...

    @property
    def teams(self) -> Mapping[str, int]:
        """Of those, per team (teams with none are absent)."""
        ...

    @property
    def vtc(self) -> FairShare: ...

    quotas: QuotaLedger | None  # None: no team or org of the config has a quota

    def take(self, team: str) -> None:
        """One more request of ``team`` in flight (and in its quota nodes)."""
        ...

    def give_back(self, team: str) -> None:
        """One request of ``team`` ended."""
        ...

    def configure(self, config: SchedulingConfig) -> None:
        """(Re)build the quotas for ``config`` (a reload); their usage restarts from the
        requests in flight now (token rates from 0)."""
        ...

    def guarantees(self, team: str, guaranteed: int) -> bool:
        """Whether a request of ``team`` is within its ``guaranteed`` requests in flight (it
        may start even over the limit). A fleet also holds each process to its share of them,
        so the fleet's starts over the limit stay within the guarantee, whatever its views'
        lag."""
        ...

    def wants_room(self, limit: int | None) -> None:
        """A request of the pool (whose limit is ``limit``) has to queue (a shared state asks
        for room at once, when its lease is below the limit)."""
        ...

    def ask_elsewhere(self, rank: int, team: str, owner: bool, count: int = 1) -> bool:
        """A starved request or claim (band ``rank`` of ``team``; ``owner``: under its
        nominal) found no stream to cancel here: ask other processes to cancel up to
        ``count`` (those asked for recently count as on their way). False: none to ask."""
        ...

    def foreseen_end(self) -> float | None:
        """When a stream another process serves is foreseen to end within about an engine
        step from now (its pace and ``max_tokens``, as published at its last sync; its slot
        frees without a cancellation, `pool.time_to_end`): the time (this clock) by which a
        request taking that slot should have its first output, its end plus one and a half
        of its steps. None: none (or alone)."""
        ...

    def describe(self) -> dict[str, object] | None:
        """What `/admin/queues` shows of the sharing (None: this process alone)."""
        ...

    def decided(self, decision: dict[str, Any]) -> None:
        """A scheduling decision of this process (a fleet's shared log keeps it)."""
        ...


# The admission state of the pool of an alias, made when the pool is first used.
PoolStates = Callable[[str], AdmissionState]


class StateLink(Protocol):
    """What keeps shared pool states in step with the other processes (`fleet.Fleet`): the
    scheduler makes each pool's state with `state` and starts and stops it with its poll."""

    def state(self, alias: str) -> AdmissionState: ...

    async def start(self, scheduler: Any) -> None:
        """Start syncing ``scheduler``'s pools (a `Scheduler`)."""
        ...

    async def aclose(self) -> None: ...


class LocalState:
    """`AdmissionState` in this process (one event loop: no locks)."""

    __slots__ = ("_clock", "admitted", "quotas", "teams", "vtc")

    lease: int | None = None  # no lease: the pool's limit decides
    queued_elsewhere = 0
    critical_elsewhere: float | None = None

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock  # the quotas' token rates decay by it
        self.admitted = 0
        self.teams: dict[str, int] = {}
        self.vtc = VirtualTokenCounters()
        self.quotas: QuotaLedger | None = None

    def take(self, team: str) -> None:
        self.admitted += 1
        add_one(self.teams, team)
        if self.quotas is not None:
            self.quotas.take(team)

    def give_back(self, team: str) -> None:
        self.admitted -= 1
        if self.quotas is not None:
            self.quotas.give_back(team)
        drop_one(self.teams, team)

    def configure(self, config: SchedulingConfig) -> None:
        self.quotas = quota_tree_holding(config, self._clock, self.teams)

    @property
    def own(self) -> int:
        return self.admitted

    def guarantees(self, team: str, guaranteed: int) -> bool:
        return self.teams.get(team, 0) < guaranteed

    def wants_room(self, limit: int | None) -> None:
        return None

    def ask_elsewhere(self, rank: int, team: str, owner: bool, count: int = 1) -> bool:
        return False

    def foreseen_end(self) -> float | None:
        return None

    def describe(self) -> dict[str, object] | None:
        return None

    def decided(self, decision: dict[str, Any]) -> None:
        return None


def add_one(counts: dict[str, int], team: str) -> None:
    """One more for ``team`` in ``counts``."""
    counts[team] = counts.get(team, 0) + 1


def drop_one(counts: dict[str, int], team: str) -> None:
    """One fewer for ``team`` in ``counts``; a team at zero leaves the map."""
    left = counts.get(team, 0) - 1
    if left > 0:
        counts[team] = left
    else:
        counts.pop(team, None)


def quota_tree_holding(
    config: SchedulingConfig, clock: Callable[[], float], held: Mapping[str, int]
) -> QuotaTree | None:
    """A fresh quota tree for ``config`` (None without quotas) that already holds the slots
    ``held`` counts per team, so a reload keeps what is admitted."""
    if not config.has_quotas:
        return None
    quotas = QuotaTree(config, clock)
    for team, count in held.items():
        for _ in range(count):
            quotas.take(team)
    return quotas
