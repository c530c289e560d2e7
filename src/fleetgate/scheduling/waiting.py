"""A request that could not start at once: it waits in its pool's queue, or is shed.

`WaitingRoom.wait` queues the request (`AdmissionQueue`: band, then fair share) and returns
when `Admission.drain` admitted it, or raises:

- the team's policy is ``reject``: 429 ``pool_saturated`` with ``Retry-After``;
- its TTFT deadline cannot be met (the estimated wait is longer): 503 ``deadline_unmeetable``;
- the queue is full and nothing of a lower band can be displaced: 503 ``queue_full``;
- it waited its band's (or team's) longest wait, or past its deadline: 503 ``queue_timeout``
  or ``deadline_exceeded``;
- a higher band displaced it from a full queue: 503 ``preempted``.

A caller that goes away while queued holds nothing; one that goes away just as it was
admitted gives its slot back.
"""

from __future__ import annotations

import asyncio

from fleetgate.errors import Overloaded, RateLimited
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.preempt import Preemption
from fleetgate.scheduling.queue import Waiter

__all__ = ["WaitingRoom"]


class WaitingRoom:
    """The queued side of admission (one per scheduler)."""

    __slots__ = ("_clock", "admission", "config", "preemption", "recorder")

    def __init__(self, preemption: Preemption) -> None:
        """``preemption``: the scheduler's; its admission, config, clock and recorder are this
        one's too."""
        admission = preemption.admission
        self.config = admission.config
        self._clock = admission.clock
        self.recorder = admission.recorder
        self.admission = admission
        self.preemption = preemption

    async def wait(self, pool: Pool, policy: RequestPolicy, tokens: int, elapsed_s: float) -> float:
        """Queue until admitted (returns the seconds waited) or raise (see the module doc).
        ``elapsed_s``: time since the request arrived (counts against its deadline)."""
        budget = policy.max_wait_s
        reason = "queue_timeout"
        if policy.deadline_s is not None and policy.deadline_s - elapsed_s < budget:
            budget, reason = max(0.0, policy.deadline_s - elapsed_s), "deadline_exceeded"
        estimate = pool.estimated_wait(policy.rank)
        self._refuse_early(pool, policy, tokens, estimate, budget, reason)
        self._make_room(pool, policy, estimate, tokens)
        loop = asyncio.get_running_loop()
        waiter = Waiter(policy, tokens, self._clock(), loop.create_future())
        waiter.ahead = pool.queue.ahead_of(policy.rank)
        pool.queue.push(waiter)
        pool.state.wants_room(pool.limit)
        self.recorder.queued(pool, policy)
        self.admission.drain(pool)  # the poll may have raised the limit since the fast path
        if policy.rank == 0 and not waiter.future.done():
            self.preemption.reclaim(pool, policy, guarantee=False, queued=True)
        elif (
            pool.quotas is not None
            and not waiter.future.done()
            and pool.quotas.unused_nominal(policy.team)
        ):  # an owner back for its share (``preempt_streams_for_claims: borrowers``)
            self.preemption.reclaim_for_owners(pool)
        try:
            if not waiter.future.done():
                await asyncio.wait((waiter.future,), timeout=budget)
        except asyncio.CancelledError:
            self._abandon(pool, waiter)
            waited = self._clock() - waiter.enqueued
            self.recorder.decide(pool, policy, tokens, "abandoned", waited, estimate, waiter.ahead)
            raise
        if waiter.future.done():
            waiter.future.result()  # raises when it was displaced
            waited = self._clock() - waiter.enqueued
            self.recorder.decide(pool, policy, tokens, "admitted", waited, estimate, waiter.ahead)
            return waited
        pool.queue.remove(waiter)
        waiter.future.cancel()
        waited = self._clock() - waiter.enqueued
        self.recorder.shed(pool, policy, reason, tokens=tokens, waited=waited, estimate=estimate)
        raise Overloaded(
            f"No capacity of '{pool.name}' became free within "
            f"{'the TTFT deadline' if reason == 'deadline_exceeded' else 'the queue wait limit'}"
            f" ({budget:.2f}s).",
            code=reason,
            retry_after=pool.estimated_wait(policy.rank) or budget or 1.0,
        )

    def _refuse_early(
        self,
        pool: Pool,
        policy: RequestPolicy,
        tokens: int,
        estimate: float | None,
        budget: float,
        reason: str,
    ) -> None:
        """Before queueing: a ``reject`` policy, or a deadline the estimate cannot meet."""
        if policy.reject:
            self.recorder.shed(pool, policy, "rejected", tokens=tokens)
            raise RateLimited(
                f"The deployments of '{pool.name}' are at capacity and this key does not queue.",
                code="pool_saturated",
                retry_after=estimate or 1.0,
            )
        if reason == "deadline_exceeded" and estimate is not None and estimate > budget:
            self.recorder.shed(
                pool, policy, "deadline_unmeetable", tokens=tokens, estimate=estimate
            )
            raise Overloaded(
                f"The deployments of '{pool.name}' cannot start this request within its TTFT "
                f"deadline (about {estimate:.2f}s of queue ahead of it).",
                code="deadline_unmeetable",
                retry_after=estimate,
            )

    def _make_room(
        self, pool: Pool, policy: RequestPolicy, estimate: float | None, tokens: int
    ) -> None:
        """A full queue: displace the newest waiter of a lower band, or refuse this one."""
        if pool.queue.size < self.config.max_queue:
            return
        evicted = pool.queue.evict(policy.rank)
        if evicted is None:
            self.recorder.shed(pool, policy, "queue_full", tokens=tokens, estimate=estimate)
            raise Overloaded(
                f"The admission queue of '{pool.name}' is full.",
                code="queue_full",
                retry_after=estimate or 1.0,
            )
        self.recorder.preempted(pool, evicted.policy, policy)
        waited = self._clock() - evicted.enqueued
        self.recorder.shed(pool, evicted.policy, "preempted", tokens=evicted.tokens, waited=waited)
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
            self.admission.release(pool, waiter.policy, 0, None)  # admitted, never used

    def cancel_all(self, pool: Pool) -> None:
        """Every waiter of ``pool`` cancelled (the scheduler closes)."""
        for waiter in pool.queue.waiters():
            pool.queue.remove(waiter)
            waiter.future.cancel()
