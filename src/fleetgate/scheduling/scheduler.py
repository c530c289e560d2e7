"""The scheduler: admits each request into its deployment pool, at once or after a queue.

`Scheduler.try_admit` is the fast path, taken whenever nobody is queued and the pool has room:
no await, no allocation beyond the counter's float. Otherwise `Scheduler.wait` queues the
request (`AdmissionQueue`: band, then fair share) and returns when it is admitted, or raises:

- the team's policy is ``reject``: 429 ``pool_saturated`` with ``Retry-After``;
- its TTFT deadline cannot be met (the estimated wait is longer): 503 ``deadline_unmeetable``;
- the queue is full and nothing of a lower band can be displaced: 503 ``queue_full``;
- it waited its band's (or team's) longest wait, or past its deadline: 503 ``queue_timeout``
  or ``deadline_exceeded``;
- a higher band displaced it from a full queue: 503 ``preempted``.

`Scheduler.release` ends an admission (charging the output tokens) and admits what now fits.
A poll every ``poll_interval_s`` follows each pool's capacity (healthy deployments) and the
engines' saturation signals, and admits what fits.

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
from collections.abc import Callable, Iterable

from fleetgate.errors import NotFound, Overloaded, RateLimited
from fleetgate.routing.table import RouteTable
from fleetgate.scheduling.config import BANDS, Band, SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.policy import Policies, RequestPolicy
from fleetgate.scheduling.pool import Pool, Snapshots, capacity_of, engines_saturated
from fleetgate.scheduling.queue import Waiter
from fleetgate.tasks import cancel_and_wait

__all__ = ["Scheduler"]

log = logging.getLogger("fleetgate.scheduling")

_MAX_COUNTERS = 4096  # teams remembered per pool before idle ones are forgotten


class Scheduler:
    """Admission for every pool of one gateway process."""

    def __init__(
        self,
        config: SchedulingConfig,
        table: Callable[[], RouteTable],
        metrics: SchedulingMetrics,
        snapshots: Snapshots | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.policies = Policies(config)  # each request's policy (cached per key)
        self._table = table
        self.metrics = metrics
        self._snapshots = snapshots
        self._clock = clock
        self.pools: dict[str, Pool] = {}
        self._task: asyncio.Task[None] | None = None
        metrics.bind(self._depth_samples, self._admitted_samples, self._limit_samples)

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
        capacity = capacity_of(route.deployments, self._clock())
        pool = self.pools[alias] = Pool(alias, capacity, self.config.critical_reserve)
        pool.takes_priority = any(d.config.priority for d in route.deployments)
        return pool

    def idle(self, alias: str, band: Band = "batch") -> bool:
        """Whether ``alias``'s pool has idle capacity for a request of ``band``: nobody queued,
        the engines not signalling saturation, and room below the limit (the batch lane sends
        a line only then, so it never takes a slot someone is waiting for)."""
        pool = self.pool(alias)
        if pool is None:
            return True
        return not pool.queue.size and not pool.signal and pool.room(BANDS.index(band))

    # ------------------------------------------------------------------ admission

    def try_admit(self, pool: Pool, policy: RequestPolicy, tokens: int) -> bool:
        """Admit at once when nobody waits and the pool has room (the fast path), or when the
        team is under its guaranteed requests in flight (even over the limit: it reclaims
        what the others borrowed)."""
        if (pool.queue.size or not pool.room(policy.rank)) and not pool.within_guarantee(
            policy.team, policy.guaranteed
        ):
            return False
        pool.take(policy.team)
        pool.vtc.charge(policy.team, tokens, policy.weight)
        return True

    async def wait(self, pool: Pool, policy: RequestPolicy, tokens: int, elapsed_s: float) -> float:
        """Queue until admitted (returns the seconds waited) or raise (see the module doc).
        ``elapsed_s``: time since the request arrived (counts against its deadline)."""
        budget = policy.max_wait_s
        reason = "queue_timeout"
        if policy.deadline_s is not None and policy.deadline_s - elapsed_s < budget:
            budget, reason = max(0.0, policy.deadline_s - elapsed_s), "deadline_exceeded"
        estimate = pool.estimated_wait(policy.rank)
        if policy.reject:
            self._shed(pool, policy, "rejected")
            raise RateLimited(
                f"The deployments of '{pool.name}' are at capacity and this key does not queue.",
                code="pool_saturated",
                retry_after=estimate or 1.0,
            )
        if reason == "deadline_exceeded" and estimate is not None and estimate > budget:
            self._shed(pool, policy, "deadline_unmeetable")
            raise Overloaded(
                f"The deployments of '{pool.name}' cannot start this request within its TTFT "
                f"deadline (about {estimate:.2f}s of queue ahead of it).",
                code="deadline_unmeetable",
                retry_after=estimate,
            )
        self._make_room(pool, policy, estimate)
        loop = asyncio.get_running_loop()
        waiter = Waiter(policy, tokens, self._clock(), loop.create_future())
        pool.queue.push(waiter)
        self.metrics.queued.labels(pool.name, policy.band, policy.team).inc()
        self._drain(pool)  # the poll may have raised the limit since the fast path looked
        try:
            if not waiter.future.done():
                await asyncio.wait((waiter.future,), timeout=budget)
        except asyncio.CancelledError:
            self._abandon(pool, waiter)
            raise
        if waiter.future.done():
            waiter.future.result()  # raises when it was displaced
            return self._clock() - waiter.enqueued
        pool.queue.remove(waiter)
        waiter.future.cancel()
        self._shed(pool, policy, reason)
        raise Overloaded(
            f"No capacity of '{pool.name}' became free within "
            f"{'the TTFT deadline' if reason == 'deadline_exceeded' else 'the queue wait limit'}"
            f" ({budget:.2f}s).",
            code=reason,
            retry_after=pool.estimated_wait(policy.rank) or budget or 1.0,
        )

    def _make_room(self, pool: Pool, policy: RequestPolicy, estimate: float | None) -> None:
        """A full queue: displace the newest waiter of a lower band, or refuse this one."""
        if pool.queue.size < self.config.max_queue:
            return
        evicted = pool.queue.evict(policy.rank)
        if evicted is None:
            self._shed(pool, policy, "queue_full")
            raise Overloaded(
                f"The admission queue of '{pool.name}' is full.",
                code="queue_full",
                retry_after=estimate or 1.0,
            )
        self.metrics.preemptions.labels(pool.name, evicted.policy.band, policy.band).inc()
        self._shed(pool, evicted.policy, "preempted")
        evicted.future.set_exception(
            Overloaded(
                f"A request of a higher priority took this one's place in the full queue of "
                f"'{pool.name}'.",
                code="preempted",
                retry_after=pool.estimated_wait(evicted.rank) or 1.0,
            )
        )

    def _abandon(self, pool: Pool, waiter: Waiter) -> None:
        """The caller went away while queued (or just as it was admitted)."""
        future = waiter.future
        if not future.done():
            pool.queue.remove(waiter)
            future.cancel()
        elif not future.cancelled() and future.exception() is None:
            self.release(pool, waiter.policy, 0, None)  # admitted, never used

    def release(
        self, pool: Pool, policy: RequestPolicy, output_tokens: int, held_s: float | None
    ) -> None:
        """An admitted request ended: charge its output, free its slot, admit what fits."""
        pool.give_back(policy.team)
        pool.vtc.charge(policy.team, output_tokens * self.config.output_token_weight, policy.weight)
        if held_s is not None:
            pool.observe_service(held_s)
        if pool.queue.size:
            self._drain(pool)

    def _drain(self, pool: Pool) -> None:
        queue = pool.queue
        while queue.size:
            head = queue.peek()
            if head is None or not pool.room(head.rank):
                return
            waiter = queue.pop()
            if waiter is None:
                return
            if waiter.future.done():  # cancelled in the meantime: it holds nothing
                continue
            pool.take(waiter.team)
            pool.vtc.charge(waiter.team, waiter.tokens, waiter.policy.weight)
            waiter.future.set_result(None)
            waited = self._clock() - waiter.enqueued
            self.metrics.wait.labels(pool.name, waiter.policy.band, waiter.team).observe(waited)

    def _shed(self, pool: Pool, policy: RequestPolicy, reason: str) -> None:
        self.metrics.sheds.labels(pool.name, policy.band, policy.team, reason).inc()

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
            pool.follow(capacity_of(deployments, now), signal)
            pool.takes_priority = any(d.config.priority for d in deployments)
            if pool.queue.size:
                self._drain(pool)
            if len(pool.vtc.counters) > _MAX_COUNTERS:
                pool.vtc.forget(pool.queue.teams())

    def reconfigure(self, config: SchedulingConfig) -> None:
        self.config = config
        self.policies = Policies(config)
        for pool in self.pools.values():
            pool.reserve = config.critical_reserve
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

    async def aclose(self) -> None:
        """Stop the poll; queued requests are cancelled (idempotent, safe without start)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        for pool in self.pools.values():
            for waiter in pool.queue.waiters():
                pool.queue.remove(waiter)
                waiter.future.cancel()

    # ------------------------------------------------------------------ views

    def _depth_samples(self) -> Iterable[tuple[tuple[str, ...], float]]:
        for name, pool in self.pools.items():
            for band, depth in zip(BANDS, pool.queue.depth(), strict=True):
                yield (name, band), float(depth)

    def _admitted_samples(self) -> Iterable[tuple[tuple[str, ...], float]]:
        for name, pool in self.pools.items():
            yield (name,), float(pool.admitted)

    def _limit_samples(self) -> Iterable[tuple[tuple[str, ...], float]]:
        for name, pool in self.pools.items():
            if pool.limit is not None:
                yield (name,), float(pool.limit)
