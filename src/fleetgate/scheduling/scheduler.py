"""The scheduler: admission into each deployment pool of one gateway process.

A thin facade over the jobs of admission, each in its own module:

- `admission.Admission`: the fast path (`try_admit`: nobody queued and room), the release of
  a slot (`release`, `finish`) and who starts from the queue when one frees;
- `waiting.WaitingRoom`: a request that could not start at once queues (`wait`) or is shed
  with a 429/503 and ``Retry-After``;
- `preempt.Preemption`: requests started through the stage (`started`), and the streams in
  flight cancelled for claims and starved requests;
- `record.Recorder`: the metrics and the routing decision log;
- `state.AdmissionState`: the counts each pool's admission decides by (in flight, quotas,
  fair share), in this process by default (``states``) or shared between the processes of a
  fleet through Redis (``link``: `fleet.Fleet`, `fleet_state.FleetState`).

The scheduler owns the pools (`pool`, made on first use from the route table), and a poll
every ``poll_interval_s`` that follows each pool's capacity (healthy deployments) and the
engines' saturation signals, and admits what fits (`upkeep`).

Example::

    pool = scheduler.pool("chat")
    if not scheduler.try_admit(pool, policy, prompt_tokens):
        await scheduler.wait(pool, policy, prompt_tokens, elapsed_s=0.0)
    ...                                  # the request runs
    scheduler.release(pool, policy, output_tokens=42, held_s=1.3)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fleetgate.errors import NotFound
from fleetgate.routing.decisions import DecisionLog
from fleetgate.routing.table import RouteTable
from fleetgate.scheduling.admission import Admission
from fleetgate.scheduling.config import Band, SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.policy import Policies, RequestPolicy
from fleetgate.scheduling.pool import Pool, Running, Snapshots, capacity_of, engines_saturated
from fleetgate.scheduling.preempt import Preemption
from fleetgate.scheduling.record import Recorder
from fleetgate.scheduling.state import LocalState, PoolStates, StateLink
from fleetgate.scheduling.waiting import WaitingRoom
from fleetgate.tasks import cancel_and_wait

__all__ = ["Scheduler"]

log = logging.getLogger("fleetgate.scheduling")

_MAX_COUNTERS = 4096  # teams remembered per pool before idle ones are forgotten


class _Started(Protocol):
    def __call__(
        self, pool: Pool, policy: RequestPolicy, outcome: Any, within: bool, max_tokens: int = 0
    ) -> Running: ...


class Scheduler:
    """Admission for every pool of one gateway process."""

    # The request path's calls, bound to the job that does each (no call in between):
    try_admit: Callable[[Pool, RequestPolicy, int], bool]
    """Admit at once, or False (`Admission.try_admit`)."""
    within: Callable[[Pool, RequestPolicy], bool]
    """Whether a request would start within its guarantee or quota (`Admission.within`)."""
    admitted_within: Callable[[Pool, RequestPolicy], bool]
    """`within` for a request admitted from the queue (`Admission.admitted_within`)."""
    wait: Callable[[Pool, RequestPolicy, int, float], Awaitable[float]]
    """Queue until admitted or shed (`WaitingRoom.wait`)."""
    started: _Started
    """Track an admitted request until `finish` (`Preemption.started`)."""
    finish: Callable[[Pool, Running, int, float | None], None]
    """A started request ended (`Admission.finish`)."""
    release: Callable[[Pool, RequestPolicy, int, float | None], None]
    """An admitted request ended (`Admission.release`)."""

    def __init__(
        self,
        config: SchedulingConfig,
        table: Callable[[], RouteTable],
        metrics: SchedulingMetrics,
        snapshots: Snapshots | None = None,
        clock: Callable[[], float] = time.monotonic,
        decisions: DecisionLog | None = None,
        states: PoolStates | None = None,
        link: StateLink | None = None,
    ) -> None:
        """``decisions``: the routing decision log, where each queued request's admission
        (band, wait, admitted or the reason it was shed) and each cancelled stream go;
        ``states``: each new pool's `AdmissionState` (`LocalState` when None); ``link``: the
        states shared with the other processes (`fleet.Fleet`; its ``state`` makes them),
        started and stopped with the poll."""
        self.config = config
        self.decisions = decisions
        self.policies = Policies(config)  # each request's policy (cached per key)
        self._table = table
        self.metrics = metrics
        self._snapshots = snapshots
        self._clock = clock
        self._link = link
        self.link = link  # (read by the admin API: a fleet's shared decision log)
        if link is not None:
            states = link.state
        self._states: PoolStates = states or (lambda alias: LocalState(clock))
        self.pools: dict[str, Pool] = {}
        self._task: asyncio.Task[None] | None = None
        recorder = Recorder(metrics, decisions, self.pools)
        self.admission = admission = Admission(config, clock, recorder)
        self.preemption = preemption = Preemption(admission)
        self.waiting = waiting = WaitingRoom(preemption)
        self.try_admit = admission.try_admit
        self.within = admission.within
        self.admitted_within = admission.admitted_within
        self.wait = waiting.wait
        self.started = preemption.started
        self.finish = admission.finish
        self.end_in_sight = admission.end_in_sight
        self.release = admission.release

    # ------------------------------------------------------------------ pools

    def pool(self, alias: str) -> Pool | None:
        """The pool serving ``alias`` (its own deployments), None for an unknown alias."""
        found = self.pools.get(alias)
        if found is not None:
            return found
        try:
            route = self._table().route(alias)
        except NotFound:
            return None
        capacity = capacity_of(route.deployments, self._clock(), self.config.engine_waiting)
        state = self._states(alias)
        state.configure(self.config)
        pool = self.pools[alias] = Pool(
            alias, capacity, self.config.critical_reserve, state, self.config.batch_headroom
        )
        pool.hold_reserve(self._clock(), self.config.critical_reserve_hold_s)
        pool.takes_priority = any(d.config.priority for d in route.deployments)
        pool.waiting = self.config.engine_waiting * len(route.deployments)
        return pool

    def idle(self, alias: str, band: Band = "batch") -> bool:
        """Whether ``alias``'s pool has idle capacity for a request of ``band``: nobody queued,
        the engines not signalling saturation, and room below the limit (the batch lane sends
        a line only then, so it never takes a slot someone is waiting for)."""
        pool = self.pool(alias)
        return pool is None or self.admission.idle(pool, band)

    # ------------------------------------------------------------------ upkeep

    def poll(self) -> None:
        """Follow every pool's capacity and engine signals; admit what now fits."""
        table = self._table()
        now = self._clock()
        marks = self.config.high_water
        for name, pool in list(self.pools.items()):
            try:
                route = table.route(name)
            except NotFound:  # the alias went away in a reload: nothing new comes
                if not pool.queue.size and not pool.admitted:
                    del self.pools[name]
                continue
            deployments = route.deployments
            signal = engines_saturated(deployments, marks, self._snapshots)
            pool.follow(capacity_of(deployments, now, self.config.engine_waiting), signal)
            pool.takes_priority = any(d.config.priority for d in deployments)
            pool.waiting = self.config.engine_waiting * len(deployments)
            self.upkeep(pool)
            if len(pool.vtc.counters) > _MAX_COUNTERS:
                pool.vtc.forget(pool.queue.teams())

    def upkeep(self, pool: Pool) -> None:
        """The poll's work on one pool after its limit moved: charge the output streamed
        since the last poll (while anyone waits, or quotas count tokens/s), admit what fits,
        and cancel a stream in flight for a starved request when configured."""
        hold = self.config.critical_reserve_hold_s
        if hold is not None:
            pool.hold_reserve(self._clock(), hold)
        if pool.running and (pool.queue.size or pool.quotas is not None):
            self.admission.charge_progress(pool)
        if pool.running:
            self.preemption.overdue(pool)
        if pool.queue.size:
            self.admission.drain(pool)
            self.preemption.reclaim_for_owners(pool)
            after = self.config.preempt_in_flight_after_s
            # (a fleet's: the stream to cancel may be another process's)
            fleet = pool.state.lease is not None
            if after is not None and pool.queue.size and (pool.running or fleet):
                self.preemption.relieve_starved(pool, after)

    def reconfigure(self, config: SchedulingConfig) -> None:
        self.config = config
        self.admission.config = self.preemption.config = self.waiting.config = config
        self.policies = Policies(config)
        for pool in self.pools.values():
            pool.reserve_share = config.critical_reserve
            pool.headroom = config.batch_headroom
            pool.hold_reserve(self._clock(), config.critical_reserve_hold_s)
            pool.state.configure(config)  # usage restarts from what is in flight (rates: 0)
        self.poll()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_interval_s)
            try:
                self.poll()
            except Exception:  # never let one bad poll stop admission
                log.exception("scheduling poll failed")

    async def start(self) -> None:
        """Start the poll (inside the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="fleetgate-scheduling"
            )
            if self._link is not None:
                await self._link.start(self)

    async def aclose(self) -> None:
        """Stop the poll; queued requests are cancelled (idempotent, safe without start)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._link is not None:
            await self._link.aclose()
        for pool in self.pools.values():
            self.waiting.cancel_all(pool)
