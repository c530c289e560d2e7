"""What the scheduler counts and logs of its admissions.

The Prometheus side (`SchedulingMetrics`): requests queued, their wait, sheds by reason,
preemptions, and gauges read from the live pools (queue depth by band, admitted, limit; with a
fleet, ``admitted`` is the fleet's and the lease and this process's own count are labelled
with the process). The
routing decision log (strategy ``scheduling``): one entry per request that did not pass at
once (``admitted`` after its wait, or why it was shed), and each stream cancelled in flight.
Requests admitted on the fast path leave no trace here but the gauges.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from fleetgate.routing.decisions import Decision, DecisionLog
from fleetgate.scheduling.config import BANDS
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool

__all__ = ["Recorder"]

Samples = Iterable[tuple[tuple[str, ...], float]]
_QUOTA_STATUS = ("under", "borrowing", "capped")


class Recorder:
    """Metrics and decision log of one scheduler; ``pools``: its live pools (the gauges)."""

    __slots__ = ("decisions", "metrics", "pools")

    def __init__(
        self, metrics: SchedulingMetrics, decisions: DecisionLog | None, pools: Mapping[str, Pool]
    ) -> None:
        self.metrics = metrics
        self.decisions = decisions
        self.pools = pools
        metrics.bind(self._depth_samples, self._admitted_samples, self._limit_samples)
        metrics.bind_fleet(self._lease_samples, self._here_samples)

    def queued(self, pool: Pool, policy: RequestPolicy) -> None:
        self.metrics.queued.labels(pool.name, policy.band, policy.team).inc()

    def granted(self, pool: Pool, policy: RequestPolicy, waited: float) -> None:
        """A queued request was admitted after ``waited`` seconds."""
        self.metrics.wait.labels(pool.name, policy.band, policy.team).observe(waited)

    def preempted(self, pool: Pool, victim: RequestPolicy, by: RequestPolicy) -> None:
        """``victim`` (queued or in flight) gave its place to ``by``."""
        self.metrics.preemptions.labels(pool.name, victim.band, by.band).inc()

    def shed(
        self,
        pool: Pool,
        policy: RequestPolicy,
        reason: str,
        *,
        tokens: int = 0,
        waited: float = 0.0,
        estimate: float | None = None,
    ) -> None:
        """A request refused, shed from the queue or cancelled in flight, for ``reason``."""
        self.metrics.sheds.labels(pool.name, policy.band, policy.team, reason).inc()
        self.decide(pool, policy, tokens, reason, waited, estimate, None)

    def decide(
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
        log = self.decisions
        process = _process(pool)
        if log is None and process is None:
            return
        quotas = pool.quotas
        quota = None if quotas is None else _QUOTA_STATUS[quotas.status(policy.team, 0)]
        decision = Decision(
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
                "process": process,  # a fleet's: which process decided
            },
        )
        if log is not None:
            log.record(decision)
        if process is not None:  # a fleet's shared log (`Fleet.recent_decisions`)
            pool.state.decided(decision.to_dict())

    def _depth_samples(self) -> Samples:
        for name, pool in self.pools.items():
            for band, depth in zip(BANDS, pool.queue.depth(), strict=True):
                yield (name, band), float(depth)

    def _admitted_samples(self) -> Samples:
        for name, pool in self.pools.items():
            yield (name,), float(pool.admitted)

    def _lease_samples(self) -> Samples:
        for name, pool in self.pools.items():
            process, lease = _process(pool), pool.state.lease
            if process is not None and lease is not None:
                yield (name, process), float(lease)

    def _here_samples(self) -> Samples:
        for name, pool in self.pools.items():
            process = _process(pool)
            if process is not None:
                yield (name, process), float(pool.state.own)

    def _limit_samples(self) -> Samples:
        for name, pool in self.pools.items():
            if pool.limit is not None:
                yield (name,), float(pool.limit)


def _process(pool: Pool) -> str | None:
    """The process of a fleet's pool (None: this process alone)."""
    described = pool.state.describe()
    process = described.get("process") if described is not None else None
    return process if isinstance(process, str) else None
