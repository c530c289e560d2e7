"""One deployment pool of this process, and how saturation is read from its deployments.

A pool is an alias's deployments. Its *capacity* is the sum of their ``max_num_seqs`` (None,
unbounded, when any of them has none); its *limit* is what admission allows in flight now:
the capacity, lowered to what was in flight when the engines signalled saturation (queue, KV
cache or TTFT over `HighWater`), and raised again by a quarter per poll once they no longer do.
`Pool.room` is the fast path's whole check: an integer comparison. The counts admission
decides by (in flight, quotas, fair share) are the pool's `AdmissionState` (``Pool.state``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_metrics import EngineSnapshot
from fleetgate.scheduling.config import HighWater
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.queue import AdmissionQueue
from fleetgate.scheduling.state import AdmissionState, FairShare, LocalState, QuotaLedger

__all__ = [
    "Pool",
    "Running",
    "Snapshots",
    "capacity_of",
    "cuttable",
    "ending",
    "engines_saturated",
    "pace",
    "time_to_end",
]

# A stream this many chunks from its end or fewer is published as ending (`time_to_end`): by
# the time another process reads it (a sync later) it is still about a step from its end.
ENDING_CHUNKS = 3

# The last scrape of a deployment's engine, if fresh (None: never scraped, or stale).
Snapshots = Callable[[Deployment], EngineSnapshot | None]


@dataclass(eq=False, slots=True)
class Running:
    """One admitted request until it ends: what the poll charges as its stream progresses,
    and what a starved higher band may cancel."""

    policy: RequestPolicy
    outcome: Any  # its `fleetgate.contract.request.Outcome` (``relayed``: chunks sent so far)
    cancellable: bool  # a stream a starved request or a claim may end (`abort`)
    seq: int
    within: bool  # admitted within its team's nominal quota or guarantee
    charged: int = 0  # output tokens charged to the fair share (and rates) so far
    cancel: FleetgateError | None = field(default=None, repr=False)  # set: end it with this
    cancel_at: float = 0.0
    requeue: bool = False  # cancelled before its first byte, it goes back to the queue
    max_tokens: int = 0  # its request's (0: not known): how far it is from its end
    # Its pace (`time_to_end`): when it was first seen with output, and its chunks then.
    paced_at: float = 0.0
    paced_from: int = -1
    # its slot was given to the next request as it reached its last chunk (`start_before_end`)
    released: bool = False
    # a claim that waits for another stream's end instead of cutting one: by when it should
    # have output (`Preemption.overdue`); 0: none
    awaits: float = 0.0
    # the stream this claim cancelled as it started over the limit: the claim is sent
    # upstream once that one has ended (`SchedulingStage`), so the engines never hold both
    cut: Running | None = field(default=None, repr=False)
    # resolved when it ends (`Admission.finish`); made for the claim that waits for that
    gone: asyncio.Future[None] | None = field(default=None, repr=False)
    # Ends the request now with the error (the stage cancels its task; see
    # `GatewayRequest.interrupt`); None outside a request (unit tests call `finish`).
    abort: Callable[[FleetgateError], None] | None = field(default=None, repr=False)


def ending(running: Running) -> bool:
    """Whether ``running`` frees its slot within about an engine step without being cancelled:
    its response is complete, or it has sent all but its last chunk of ``max_tokens`` (a
    chunk carries one token or more; a stream that ends earlier, at its end-of-sequence, is
    not foreseen)."""
    if running.outcome.settled:
        return True
    limit = running.max_tokens
    return limit > 0 and running.outcome.relayed + 1 >= limit


def cuttable(running: Running) -> bool:
    """Whether ``running`` may be cancelled for another request now: a stream that allows it,
    not cancelled yet, not complete (it ends on its own), and not at its last chunk with its
    slot already given to the next request (`start_before_end`)."""
    return (
        running.cancellable
        and running.cancel is None
        and not running.outcome.settled
        and not running.released
    )


def pace(running: Running, now: float) -> float | None:
    """Seconds per chunk of ``running`` since it was first seen with output (`time_to_end`
    starts the count); None: not known yet."""
    relayed: int = running.outcome.relayed
    chunks = relayed - running.paced_from
    if running.paced_from < 0 or chunks < 2:
        return None
    return (now - running.paced_at) / chunks


def time_to_end(running: Running, now: float) -> tuple[float, float] | None:
    """(seconds until ``running`` is foreseen to end, seconds per chunk) when it is within
    `ENDING_CHUNKS` chunks of its ``max_tokens``, by its own pace: chunks relayed per second
    since it was first seen with output (the first call with output starts the count, ``now``
    on one clock). None: not foreseen (no ``max_tokens``, its pace not known yet, complete,
    or further from its end)."""
    relayed, limit = running.outcome.relayed, running.max_tokens
    if limit <= 0 or relayed <= 0 or running.outcome.settled:
        return None
    if running.paced_from < 0:
        running.paced_at, running.paced_from = now, relayed
        return None
    step = pace(running, now)
    left = limit - relayed
    if step is None or left > ENDING_CHUNKS:
        return None
    # its last chunk came between now and a step ago: the end is half a step early on average
    return max(0.0, (left - 0.5) * step), step


class Pool:
    """One pool of this process: its limit, queue and streams in flight, around its
    `AdmissionState` (the counts, ``state``; one event loop: no locks)."""

    __slots__ = (
        "capacity",
        "critical_seen",
        "early",
        "headroom",
        "limit",
        "name",
        "pace_at",
        "pace_tokens",
        "queue",
        "running",
        "seq",
        "reserve",
        "reserve_share",
        "service_s",
        "signal",
        "state",
        "takes_priority",
        "waiting",
    )

    def __init__(
        self,
        name: str,
        capacity: int | None,
        reserve: float,
        state: AdmissionState | None = None,
        headroom: float = 0.0,
    ) -> None:
        """``state``: the pool's counts (`LocalState` when None); ``headroom``: the share of
        the limit the batch and sheddable bands leave free (``batch_headroom``)."""
        self.name = name
        self.capacity = capacity
        self.limit = capacity  # None: unbounded
        # of the limit, requests that may be waiting inside the engines (``engine_waiting``
        # per deployment): a stream without output may hold no engine slot
        self.waiting = 0
        self.early = 0  # streams whose slot went to the next request before their end
        self.reserve_share = reserve  # `critical_reserve`: the share to hold when asked
        self.reserve = reserve  # share of the limit only the critical band may take now
        self.headroom = headroom
        self.critical_seen: float | None = None  # when a critical request last arrived
        self.state: AdmissionState = state if state is not None else LocalState(time.monotonic)
        self.signal = False  # the engines say saturated
        self.queue = AdmissionQueue(self.state.vtc)
        self.service_s: float | None = None  # EWMA of admission to end, for wait estimates
        self.takes_priority = False  # a deployment takes vLLM's ``priority`` field
        self.running: dict[Running, None] = {}  # admitted through the stage, oldest first
        self.seq = 0
        self.pace_tokens = 1.0  # `paced`: starts from the queue allowed now (at most 1)
        self.pace_at = 0.0

    # The counts, read through the pool (views, the console, tests).

    @property
    def admitted(self) -> int:
        """Requests admitted and not yet finished."""
        return self.state.admitted

    @admitted.setter
    def admitted(self, count: int) -> None:
        self.state.admitted = count

    @property
    def teams(self) -> Mapping[str, int]:
        """Requests in flight per team."""
        return self.state.teams

    @property
    def vtc(self) -> FairShare:
        return self.state.vtc

    @property
    def quotas(self) -> QuotaLedger | None:
        """None: no team or org of the config has a quota."""
        return self.state.quotas

    @quotas.setter
    def quotas(self, quotas: QuotaLedger | None) -> None:
        self.state.quotas = quotas

    def take(self, team: str) -> None:
        """One more request of ``team`` in flight."""
        self.state.take(team)

    def give_back(self, team: str) -> None:
        """One request of ``team`` ended."""
        self.state.give_back(team)

    def room(self, rank: int, held: int = 0, headroom: bool = False) -> bool:
        """Whether a request of band ``rank`` may start now (rank 0, critical, may use the
        reserve); ``held``: slots reserved for others (quotas' unlent nominal); ``headroom``:
        it leaves the batch headroom free (`RequestPolicy.keeps_headroom`)."""
        state = self.state
        lease = state.lease  # a fleet's: the slots this process may fill
        if lease is not None and state.own >= lease:
            return False
        limit = self.limit
        if limit is None:
            return True
        if rank == 0:
            return state.admitted + held < limit
        cap = limit - int(limit * self.reserve)
        if headroom and self.headroom and limit > 1:
            cap -= max(1, int(limit * self.headroom))  # kept for interactive requests
        return state.admitted + held < cap

    def hold_reserve(self, now: float, hold_s: float | None) -> None:
        """``critical_reserve_hold_s``: hold the reserve while a critical request arrived
        within the last ``hold_s`` seconds, free it for everyone otherwise (None: always
        held). Called when a critical request arrives and at each poll."""
        if hold_s is None:
            self.reserve = self.reserve_share
            return
        seen = self.critical_seen
        elsewhere = self.state.critical_elsewhere  # a fleet: critical requests anywhere
        if elsewhere is not None and (seen is None or elsewhere > seen):
            seen = elsewhere
        active = seen is not None and now - seen < hold_s
        self.reserve = self.reserve_share if active else 0.0

    def paced(self, now: float, factor: float, interval: float) -> bool:
        """Whether a request may start from the queue now under ``queue_pacing``: starts are
        spaced at ``factor`` x the pool's turnover (limit / mean service time), at most one
        poll ``interval``'s worth (and at least one) at once, so slots that free together are
        refilled over about a service time and the requests started then do not all end (and
        free their slots) together again. True while the turnover is not known. Takes the
        start when it returns True."""
        limit, service = self.limit, self.service_s
        if limit is None or not service:
            return True
        rate = factor * limit / service
        cap = max(1.0, rate * interval)
        tokens = min(cap, self.pace_tokens + (now - self.pace_at) * rate)
        self.pace_at = now
        allowed = tokens >= 1.0
        self.pace_tokens = tokens - 1.0 if allowed else tokens
        return allowed

    def within_guarantee(self, team: str, guaranteed: int) -> bool:
        """Whether ``team`` has fewer than its ``guaranteed`` requests in flight (a fleet's:
        also fewer than its share of them in this process, `AdmissionState.guarantees`)."""
        return guaranteed > 0 and self.state.guarantees(team, guaranteed)

    def over_limit(self) -> int:
        """Requests started over the pool's limit (claims: a guarantee, a critical request).
        In a fleet also those this process started over its own lease while its view of the
        fleet shows no free slot: the leases add up to the limit, and the others' counts in
        that view may be a sync old (they may have filled their leases since)."""
        limit = self.limit
        if limit is None:
            return 0
        state = self.state
        over = state.admitted - limit
        lease = state.lease
        if lease is not None and over >= 0:
            over = max(over, state.own - lease)
        return max(0, over)

    @property
    def saturated(self) -> bool:
        return self.limit is not None and self.state.admitted >= self.limit

    def observe_service(self, seconds: float) -> None:
        prev = self.service_s
        self.service_s = seconds if prev is None else prev + 0.2 * (seconds - prev)

    def estimated_wait(self, rank: int) -> float | None:
        """Seconds a new request of band ``rank`` would wait, from the queue ahead of it and
        the mean service time; None when unknown."""
        if self.service_s is None:
            return None
        slots = max(1, self.limit if self.limit is not None else self.state.admitted)
        return (self.queue.ahead_of(rank) + 1) * self.service_s / slots

    def follow(self, capacity: int | None, signal: bool) -> None:
        """New capacity and engine signal (each poll): move the limit."""
        self.capacity = capacity
        if signal and not self.signal:  # onset: hold what is in flight now
            onset = max(1, self.state.admitted)
            self.limit = onset if self.limit is None else min(self.limit, onset)
        elif not signal and self.limit is not None:
            grown = self.limit + max(1, self.limit // 4)
            if capacity is not None:
                self.limit = min(grown, capacity)
            elif self.queue.size:  # drain a queue gradually
                self.limit = grown
            else:
                self.limit = None  # nothing queued, engines fine: unbounded again
        if capacity is not None and (self.limit is None or self.limit > capacity):
            self.limit = capacity
        self.signal = signal


def capacity_of(deployments: Sequence[Deployment], now: float, waiting: int = 0) -> int | None:
    """The sum of the healthy deployments' ``max_num_seqs`` (all of them when none is healthy,
    so the dispatcher answers at once), each plus ``waiting`` (``engine_waiting``: requests
    that wait inside it for its next free slot); None when any has no ``max_num_seqs``, and
    when there is no deployment at all (an InferencePool with no ready pod, an empty registry
    stage): the dispatcher's 503 at once, not a wait in the queue for capacity none may
    bring."""
    if not deployments:
        return None
    healthy = [d for d in deployments if d.state.healthy(now)] or list(deployments)
    total = 0
    for dep in healthy:
        seqs = dep.config.max_num_seqs
        if seqs is None:
            return None
        total += seqs + waiting
    return total


def _over(dep: Deployment, snap: EngineSnapshot | None, marks: HighWater) -> bool | None:
    """Whether ``dep`` is over a mark (None: nothing to judge by)."""
    readings: list[bool] = []
    if snap is not None:
        if marks.engine_queue is not None:
            readings.append(snap.waiting >= marks.engine_queue)
        if marks.kv_usage is not None:
            readings.append(snap.kv_usage >= marks.kv_usage)
    ttft = dep.state.ewma_ttft_s
    if marks.ttft_s is not None and ttft is not None:
        readings.append(ttft >= marks.ttft_s)
    return any(readings) if readings else None


def engines_saturated(
    deployments: Sequence[Deployment], marks: HighWater, snapshots: Snapshots | None
) -> bool:
    """True when every deployment with a reading is over one of the marks (and one has)."""
    if marks.engine_queue is None and marks.kv_usage is None and marks.ttft_s is None:
        return False
    judged = [_over(d, snapshots(d) if snapshots is not None else None, marks) for d in deployments]
    known = [j for j in judged if j is not None]
    return bool(known) and all(known)
