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
from typing import Any

from fleetgate.errors import NotFound, Overloaded, RateLimited
from fleetgate.routing.decisions import Decision, DecisionLog
from fleetgate.routing.table import RouteTable
from fleetgate.scheduling.config import BANDS, Band, SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.policy import Policies, RequestPolicy
from fleetgate.scheduling.pool import Pool, Running, Snapshots, capacity_of, engines_saturated
from fleetgate.scheduling.preempt import claim_victim
from fleetgate.scheduling.queue import Waiter
from fleetgate.scheduling.quota import BORROWING, CAPPED, UNDER, QuotaTree
from fleetgate.tasks import cancel_and_wait

__all__ = ["Scheduler"]

log = logging.getLogger("fleetgate.scheduling")

_MAX_COUNTERS = 4096  # teams remembered per pool before idle ones are forgotten
_CANCEL_GRACE_S = 1.0  # a cancelled stream that has not ended by then no longer holds others


class Scheduler:
    """Admission for every pool of one gateway process."""

    def __init__(
        self,
        config: SchedulingConfig,
        table: Callable[[], RouteTable],
        metrics: SchedulingMetrics,
        snapshots: Snapshots | None = None,
        clock: Callable[[], float] = time.monotonic,
        decisions: DecisionLog | None = None,
    ) -> None:
        """``decisions``: the routing decision log, where each queued request's admission
        (band, wait, admitted or the reason it was shed) and each cancelled stream go."""
        self.config = config
        self.decisions = decisions
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
        pool.hold_reserve(self._clock(), self.config.critical_reserve_hold_s)
        if self.config.has_quotas:
            pool.quotas = QuotaTree(self.config, self._clock)
        pool.takes_priority = any(d.config.priority for d in route.deployments)
        return pool

    def idle(self, alias: str, band: Band = "batch") -> bool:
        """Whether ``alias``'s pool has idle capacity for a request of ``band``: nobody queued,
        the engines not signalling saturation, and room below the limit (the batch lane sends
        a line only then, so it never takes a slot someone is waiting for)."""
        pool = self.pool(alias)
        if pool is None:
            return True
        if pool.queue.size or pool.signal:
            return False
        held = pool.quotas.reserved_for("") if pool.quotas is not None else 0
        return pool.room(BANDS.index(band), held)

    # ------------------------------------------------------------------ admission

    def try_admit(self, pool: Pool, policy: RequestPolicy, tokens: int) -> bool:
        """Admit at once when nobody waits and the pool has room (the fast path), or when the
        team is under its guaranteed requests in flight (even over the limit: it reclaims
        what the others borrowed)."""
        if policy.rank == 0 and self.config.critical_reserve_hold_s is not None:
            pool.critical_seen = now = self._clock()
            pool.hold_reserve(now, self.config.critical_reserve_hold_s)
        quotas = pool.quotas
        if quotas is None:
            if (pool.queue.size or not pool.room(policy.rank)) and not pool.within_guarantee(
                policy.team, policy.guaranteed
            ):
                return False
        elif not pool.within_guarantee(policy.team, policy.guaranteed) and (
            pool.queue.size
            or quotas.status(policy.team) == CAPPED
            or not pool.room(policy.rank, quotas.reserved_for(policy.team))
        ):
            return False
        self._admit(pool, policy.team, tokens, policy.weight)
        return True

    def _admit(self, pool: Pool, team: str, tokens: int, weight: float) -> None:
        pool.take(team)
        pool.vtc.charge(team, tokens, weight)
        if pool.quotas is not None:
            pool.quotas.charge(team, tokens)

    def within(self, pool: Pool, policy: RequestPolicy) -> bool:
        """Whether a request about to start is within its team's guarantee or, with quotas,
        its nominal share (it gets the engine priority of an owner reclaiming its share)."""
        if pool.within_guarantee(policy.team, policy.guaranteed):
            return True
        return pool.quotas is not None and pool.quotas.status(policy.team) == UNDER

    async def wait(self, pool: Pool, policy: RequestPolicy, tokens: int, elapsed_s: float) -> float:
        """Queue until admitted (returns the seconds waited) or raise (see the module doc).
        ``elapsed_s``: time since the request arrived (counts against its deadline)."""
        budget = policy.max_wait_s
        reason = "queue_timeout"
        if policy.deadline_s is not None and policy.deadline_s - elapsed_s < budget:
            budget, reason = max(0.0, policy.deadline_s - elapsed_s), "deadline_exceeded"
        estimate = pool.estimated_wait(policy.rank)
        if policy.reject:
            self._shed(pool, policy, "rejected", tokens=tokens)
            raise RateLimited(
                f"The deployments of '{pool.name}' are at capacity and this key does not queue.",
                code="pool_saturated",
                retry_after=estimate or 1.0,
            )
        if reason == "deadline_exceeded" and estimate is not None and estimate > budget:
            self._shed(pool, policy, "deadline_unmeetable", tokens=tokens, estimate=estimate)
            raise Overloaded(
                f"The deployments of '{pool.name}' cannot start this request within its TTFT "
                f"deadline (about {estimate:.2f}s of queue ahead of it).",
                code="deadline_unmeetable",
                retry_after=estimate,
            )
        self._make_room(pool, policy, estimate, tokens)
        loop = asyncio.get_running_loop()
        waiter = Waiter(policy, tokens, self._clock(), loop.create_future())
        waiter.ahead = pool.queue.ahead_of(policy.rank)
        pool.queue.push(waiter)
        self.metrics.queued.labels(pool.name, policy.band, policy.team).inc()
        self._drain(pool)  # the poll may have raised the limit since the fast path looked
        if policy.rank == 0 and not waiter.future.done():
            self._reclaim(pool, policy, guarantee=False)
        try:
            if not waiter.future.done():
                await asyncio.wait((waiter.future,), timeout=budget)
        except asyncio.CancelledError:
            self._abandon(pool, waiter)
            waited = self._clock() - waiter.enqueued
            self._decide(pool, policy, tokens, "abandoned", waited, estimate, waiter.ahead)
            raise
        if waiter.future.done():
            waiter.future.result()  # raises when it was displaced
            waited = self._clock() - waiter.enqueued
            self._decide(pool, policy, tokens, "admitted", waited, estimate, waiter.ahead)
            return waited
        pool.queue.remove(waiter)
        waiter.future.cancel()
        waited = self._clock() - waiter.enqueued
        self._shed(pool, policy, reason, tokens=tokens, waited=waited, estimate=estimate)
        raise Overloaded(
            f"No capacity of '{pool.name}' became free within "
            f"{'the TTFT deadline' if reason == 'deadline_exceeded' else 'the queue wait limit'}"
            f" ({budget:.2f}s).",
            code=reason,
            retry_after=pool.estimated_wait(policy.rank) or budget or 1.0,
        )

    def _make_room(
        self, pool: Pool, policy: RequestPolicy, estimate: float | None, tokens: int
    ) -> None:
        """A full queue: displace the newest waiter of a lower band, or refuse this one."""
        if pool.queue.size < self.config.max_queue:
            return
        evicted = pool.queue.evict(policy.rank)
        if evicted is None:
            self._shed(pool, policy, "queue_full", tokens=tokens, estimate=estimate)
            raise Overloaded(
                f"The admission queue of '{pool.name}' is full.",
                code="queue_full",
                retry_after=estimate or 1.0,
            )
        self.metrics.preemptions.labels(pool.name, evicted.policy.band, policy.band).inc()
        waited = self._clock() - evicted.enqueued
        self._shed(pool, evicted.policy, "preempted", tokens=evicted.tokens, waited=waited)
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

    def started(self, pool: Pool, policy: RequestPolicy, outcome: Any, within: bool) -> Running:
        """An admitted request starts (the stage): tracked until `finish`, so its output is
        charged as it streams and, when ``preempt_in_flight_after_s`` or
        ``preempt_streams_for_claims`` is set and it is a stream below `critical`, a starved
        request or a claim may cancel it. ``within``: it was admitted within its team's
        guarantee or nominal quota (a claim). A claim that took the pool over its limit
        cancels one stream without a claim (``preempt_streams_for_claims``)."""
        pool.seq += 1
        config = self.config
        preempts = (
            config.preempt_in_flight_after_s is not None
            or config.preempt_streams_for_claims is not None
        )
        running = Running(policy, outcome, preempts and policy.rank > 0, pool.seq, within)
        pool.running[running] = None
        limit = pool.limit
        if (
            config.preempt_streams_for_claims is not None
            and (within or policy.rank == 0)
            and limit is not None
            and pool.admitted > limit
        ):
            self._reclaim(pool, policy, guarantee=within)
        return running

    def finish(
        self, pool: Pool, running: Running, output_tokens: int, held_s: float | None
    ) -> None:
        """A request `started` ended: charge the output not charged yet, free its slot."""
        pool.running.pop(running, None)
        self.release(pool, running.policy, max(0, output_tokens - running.charged), held_s)

    def release(
        self, pool: Pool, policy: RequestPolicy, output_tokens: int, held_s: float | None
    ) -> None:
        """An admitted request ended: charge its output, free its slot, admit what fits."""
        pool.give_back(policy.team)
        pool.vtc.charge(policy.team, output_tokens * self.config.output_token_weight, policy.weight)
        if pool.quotas is not None:
            pool.quotas.charge(policy.team, output_tokens)
        if held_s is not None:
            pool.observe_service(held_s)
        if pool.queue.size:
            self._drain(pool)

    def _paced(self, pool: Pool, waiter: Waiter) -> bool:
        """``queue_pacing``: whether ``waiter`` may start now. The critical band and requests
        within their team's guarantee are never held back."""
        factor = self.config.queue_pacing
        if factor is None or waiter.rank == 0:
            return True
        if pool.within_guarantee(waiter.team, waiter.policy.guaranteed):
            return True
        return pool.paced(self._clock(), factor, self.config.poll_interval_s)

    def _drain(self, pool: Pool) -> None:
        if pool.quotas is not None:
            self._drain_quotas(pool, pool.quotas)
            return
        queue = pool.queue
        while queue.size:
            head = queue.peek()
            if head is None or not pool.room(head.rank) or not self._paced(pool, head):
                return
            waiter = queue.pop()
            if waiter is None:
                return
            if waiter.future.done():  # cancelled in the meantime: it holds nothing
                pool.pace_tokens += 1.0  # it did not start
                continue
            self._grant(pool, waiter)

    def _grant(self, pool: Pool, waiter: Waiter) -> None:
        self._admit(pool, waiter.team, waiter.tokens, waiter.policy.weight)
        waiter.future.set_result(None)
        waited = self._clock() - waiter.enqueued
        self.metrics.wait.labels(pool.name, waiter.policy.band, waiter.team).observe(waited)

    def _classifier(
        self, pool: Pool, quotas: QuotaTree, room: bool
    ) -> Callable[[str, int], int | None]:
        """For `AdmissionQueue.choose`: a team's class (-1 within its guarantee, then `UNDER`,
        `BORROWING`), None while it may not start (capped, or, with ``room``, no room left
        for it beside the others' reserved slots)."""

        def classify(team: str, rank: int) -> int | None:
            policy = self.policies.config.teams.get(team)
            guaranteed = policy.guaranteed if policy is not None else 0
            if pool.within_guarantee(team, guaranteed):
                return -1
            status = quotas.status(team)
            if status == CAPPED or (room and not pool.room(rank, quotas.reserved_for(team))):
                return None
            return status

        return classify

    def _drain_quotas(self, pool: Pool, quotas: QuotaTree) -> None:
        queue = pool.queue
        classify = self._classifier(pool, quotas, room=True)
        while queue.size:
            waiter = queue.choose(classify, remember=False)
            if waiter is None or not self._paced(pool, waiter):
                return
            pool.vtc.fairest((waiter.team,))  # remembered as served last
            queue.remove(waiter)
            if not waiter.future.done():
                self._grant(pool, waiter)

    def _shed(
        self,
        pool: Pool,
        policy: RequestPolicy,
        reason: str,
        *,
        tokens: int = 0,
        waited: float = 0.0,
        estimate: float | None = None,
    ) -> None:
        self.metrics.sheds.labels(pool.name, policy.band, policy.team, reason).inc()
        self._decide(pool, policy, tokens, reason, waited, estimate, None)

    def _decide(
        self,
        pool: Pool,
        policy: RequestPolicy,
        tokens: int,
        reason: str,
        waited: float,
        estimate: float | None,
        ahead: int | None,
    ) -> None:
        """The admission decision of a request that did not pass at once, into the routing
        decision log (strategy ``scheduling``; reason ``admitted`` or why it was shed)."""
        log_ = self.decisions
        if log_ is None:
            return
        quota = None
        if pool.quotas is not None:
            quota = ("under", "borrowing", "capped")[pool.quotas.status(policy.team, 0)]
        log_.record(
            Decision(
                at=time.time(),
                alias=pool.name,
                strategy="scheduling",
                picked=pool.name if reason == "admitted" else "",
                reason=reason,
                prompt_tokens=tokens,
                cached_tokens=0,
                tenant=policy.team,
                admission={
                    "band": policy.band,
                    "team": policy.team,
                    "wait_s": round(waited, 6),
                    "queued_ahead": ahead,
                    "estimated_wait_s": None if estimate is None else round(estimate, 6),
                    "limit": pool.limit,
                    "admitted": pool.admitted,
                    "quota": quota,
                },
            )
        )

    # ------------------------------------------------------------------ in flight

    def _charge_progress(self, pool: Pool) -> None:
        """Charge the output each stream sent since the last poll (fair share, rates)."""
        weight = self.config.output_token_weight
        quotas = pool.quotas
        for running in pool.running:
            sent = running.outcome.relayed
            if sent > running.charged:
                delta = sent - running.charged
                running.charged = sent
                policy = running.policy
                pool.vtc.charge(policy.team, delta * weight, policy.weight)
                if quotas is not None:
                    quotas.charge(policy.team, delta)

    def _reclaim(self, pool: Pool, claimant: RequestPolicy, guarantee: bool) -> None:
        """``preempt_streams_for_claims``: a claim is over the pool's limit (or a critical
        request queued): cancel one stream without a claim, unless the cancellations already
        on their way cover every claim over the limit (one victim per claim)."""
        mode = self.config.preempt_streams_for_claims
        limit = pool.limit
        if mode is None or limit is None:
            return
        need = max(0, pool.admitted - limit) + pool.queue.depth()[0]
        now = self._clock()
        pending = sum(
            1 for r in pool.running if r.cancel is not None and now - r.cancel_at < _CANCEL_GRACE_S
        )
        if pending >= need:
            return
        victim = claim_victim(pool, claimant, borrowers=guarantee and mode == "borrowers")
        if victim is not None:
            self._cancel(pool, victim, claimant, now)

    def _cancel(self, pool: Pool, victim: Running, by: RequestPolicy, now: float) -> None:
        """End ``victim``'s request now with a retryable error (`Running.abort`), for ``by``;
        counted and logged."""
        why = "a higher band" if victim.policy.rank > by.rank else "the owner of its share"
        victim.cancel = Overloaded(
            f"This stream was cancelled to make room in '{pool.name}' for {why}; it is billed "
            f"for the output it received. Retry later.",
            code="preempted_in_flight",
            retry_after=pool.estimated_wait(victim.policy.rank) or 1.0,
        )
        victim.cancel_at = now
        # Before its first byte (the relay not begun) a request with requeues left goes back
        # to the queue: not a shed.
        requeued = victim.requeue and victim.outcome.first_token_at is None
        if victim.abort is not None:  # at once: the upstream request is aborted, its slot freed
            victim.abort(victim.cancel)
        self.metrics.preemptions.labels(pool.name, victim.policy.band, by.band).inc()
        if requeued:
            self._decide(pool, victim.policy, 0, "requeued", 0.0, None, None)
        else:
            self._shed(pool, victim.policy, "preempted_in_flight", tokens=victim.outcome.relayed)

    def _preempt_in_flight(self, pool: Pool, after_s: float) -> None:
        """A queued request starved ``after_s`` (no room for it) cancels one stream in flight
        of a lower band, or, when its team is under its nominal quota, of a borrowing team of
        its band or lower: the newest of the lowest band. One cancellation at a time."""
        now = self._clock()
        for running in pool.running:
            if running.cancel is not None and now - running.cancel_at < _CANCEL_GRACE_S:
                return  # the slot it frees is on its way
        quotas = pool.quotas
        if quotas is None:
            head = pool.queue.peek()
            if head is None or pool.room(head.rank):
                return
            owner = False
        else:
            head = pool.queue.choose(self._classifier(pool, quotas, room=False), remember=False)
            if head is None or pool.room(head.rank, quotas.reserved_for(head.team)):
                return
            owner = quotas.status(head.team) == UNDER
        if now - head.enqueued < after_s:
            return
        victim: Running | None = None
        for running in pool.running:
            if not running.cancellable or running.cancel is not None or running.outcome.settled:
                continue
            rank = running.policy.rank
            lower = rank > head.rank
            reclaim = (
                owner
                and quotas is not None
                and rank >= head.rank
                and running.policy.team != head.team
                and quotas.status(running.policy.team, 0) == BORROWING
            )
            if (lower or reclaim) and (
                victim is None or (rank, running.seq) > (victim.policy.rank, victim.seq)
            ):
                victim = running
        if victim is not None:
            self._cancel(pool, victim, head.policy, now)

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
            self._charge_progress(pool)
        if pool.queue.size:
            self._drain(pool)
            after = self.config.preempt_in_flight_after_s
            if after is not None and pool.queue.size and pool.running:
                self._preempt_in_flight(pool, after)

    def reconfigure(self, config: SchedulingConfig) -> None:
        self.config = config
        self.policies = Policies(config)
        for pool in self.pools.values():
            pool.reserve_share = config.critical_reserve
            pool.hold_reserve(self._clock(), config.critical_reserve_hold_s)
            pool.quotas = QuotaTree(config, self._clock) if config.has_quotas else None
            if pool.quotas is not None:  # usage restarts from what is in flight (rates: 0)
                for team, count in pool.teams.items():
                    for _ in range(count):
                        pool.quotas.take(team)
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
