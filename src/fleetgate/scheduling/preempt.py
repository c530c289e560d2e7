"""Preemption in flight: which stream a claim or a starved request cancels, and the cancel.

A *claim* is a request of the `critical` band, or one within its team's ``guaranteed``
requests in flight or its nominal quota. vLLM v1 never preempts a running sequence to give a
slot to a more important one, so a claim that takes the pool over its limit would wait in the
engine for a stream to end; the scheduler instead cancels one stream that has no claim: the
upstream request is aborted, which frees the engine's slot, and the client gets a retryable
in-stream error and is billed for what it received (or, before its first byte, the request
is requeued).

- ``preempt_streams_for_claims``: a claim that starts over the pool's limit, or a critical
  request that has to queue, cancels one stream without a claim (`claim_victim`), one victim
  per claim over the limit (`Preemption.reclaim`);
- ``preempt_in_flight_after_s``: a queued request starved that long cancels one stream of a
  lower band, or, for a team under its nominal quota, of a borrowing team
  (`Preemption.relieve_starved`, at each poll), one cancellation at a time.

`Preemption.started` tracks every request admitted through the stage (`Running`) until
`Admission.finish`: what may be cancelled, and what the poll charges as it streams.

Example::

    victim = claim_victim(pool, critical_policy, borrowers=False)
    if victim is not None:
        ...  # the scheduler cancels it: victim.abort(error) ends the request now
"""

from __future__ import annotations

import math
from typing import Any

from fleetgate.errors import Overloaded
from fleetgate.scheduling.admission import Admission
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool, Running, cuttable, ending, pace
from fleetgate.scheduling.queue import Waiter
from fleetgate.scheduling.quota import BORROWING, UNDER

__all__ = ["Preemption", "claim_victim", "starved_victim"]

CANCEL_GRACE_S = 1.0  # a cancelled stream that has not ended by then no longer holds others


def claim_victim(pool: Pool, claimant: RequestPolicy, borrowers: bool) -> Running | None:
    """The stream a claim of ``claimant`` cancels: one in flight that may be cancelled, is
    not cancelled yet and has no claim of its own (admitted outside its team's guarantee and
    nominal quota), of a lower band, or, with ``borrowers``, of the claimant's band and
    another team that is borrowing (no quota, or over its nominal). The lowest band first,
    then the one that has sent the least output (the least work lost), then the newest;
    with ``engine_waiting`` or ``start_before_end`` one that holds an engine slot
    (`_holding`)."""
    return _victim_of(pool, _claimable(pool, claimant, borrowers))


def _victim_of(pool: Pool, band: list[Running]) -> Running | None:
    """`claim_victim`'s choice among ``band`` (`_claimable`)."""
    if not band:
        return None
    held = _holding(band, pool.waiting + pool.early)
    return held if held is not None else _least_output(band)


def _claimable(pool: Pool, claimant: RequestPolicy, borrowers: bool) -> list[Running]:
    """The streams a claim of ``claimant`` may cancel (`claim_victim`), of the lowest band
    among them, oldest first."""
    quotas = pool.quotas
    band: list[Running] = []
    rank = -1
    for running in pool.running:
        if running.within or not cuttable(running):
            continue
        victim = running.policy
        if victim.rank <= claimant.rank and not (
            borrowers
            and victim.rank == claimant.rank
            and victim.team != claimant.team
            and (quotas is None or quotas.status(victim.team, 0) == BORROWING)
        ):
            continue
        if victim.rank > rank:
            band, rank = [running], victim.rank
        elif victim.rank == rank:
            band.append(running)
    return band


def _early_taker(band: list[Running]) -> Running | None:
    """With a stream's slot given early (`start_before_end`), the request that took it waits
    inside the engine until that stream's last step ends: the newest stream of ``band`` (what
    the claim may cancel, `_claimable`) without output, if any. A claim that starts over the
    limit meanwhile cancels it (it is requeued: no output lost) and takes that slot itself
    within the step, so the engine holds no more than before; None: no such stream."""
    fresh = [r for r in band if r.outcome.relayed == 0 and r.outcome.first_token_at is None]
    return fresh[-1] if fresh else None


def _least_output(streams: list[Running]) -> Running:
    """Of ``streams`` (oldest first, at least one), the one that has sent the least output;
    on a tie, the newest."""
    best = streams[0]
    for running in streams:
        if running.outcome.relayed <= best.outcome.relayed:
            best = running
    return best


def _holding(band: list[Running], waiting: int) -> Running | None:
    """With ``engine_waiting`` or ``start_before_end`` (``waiting`` requests of the pool may
    wait inside its engines: those admitted beyond its slots, and those given the slot of a
    stream still running its last step), among ``band`` (oldest first): a stream without
    output that must hold an engine slot (in its prefill), since only the ``waiting`` newest
    of them can be waiting: the newest of the others, cancelled (and requeued) with no output
    lost; else one that has begun (its output, the least lost). None: no such choice (or
    nothing waiting), the caller's own order decides."""
    if not waiting:
        return None
    fresh = [r for r in band if r.outcome.relayed == 0]
    if len(fresh) > waiting:
        return fresh[-waiting - 1]
    begun = [r for r in band if r.outcome.relayed > 0]
    return _least_output(begun) if begun else None


def _on_their_way(
    pool: Pool, now: float, queued: bool = False, ends: bool = True
) -> tuple[int, float | None]:
    """Slots of ``pool`` about to free without a new cancellation: streams already cancelled
    (within `CANCEL_GRACE_S`), and one stream that ends within about an engine step, here
    (`ending`) or, in a fleet, in another process (foreseen from its pace:
    `AdmissionState.foreseen_end`). One claim at a time waits that long instead of
    cutting another stream short; more would each hold one more request at the engines
    meanwhile. A stream whose slot already went to the next request (`start_before_end`)
    frees nothing for a claim; and while such a request may wait inside the engine (its
    stream not ended yet), a started claim (not ``queued``: it would wait inside the engine
    too) counts on no end at all, so the engines hold at most one request of this process
    beyond its slots. Also returns, when an end is counted, by when a claim taking its slot
    should have output (`Preemption.overdue`; infinite when its pace is not known).
    Without ``ends``, only the cancellations count (a claim that waited for an end in vain)."""
    count = 0
    due: float | None = None
    ends = ends and (queued or not pool.early)
    for r in pool.running:
        if r.cancel is not None:
            count += now - r.cancel_at < CANCEL_GRACE_S
        elif ends and due is None and ending(r) and not r.released:
            step = pace(r, now)
            due = math.inf if step is None else now + 2.5 * step
    if ends and due is None:
        due = pool.state.foreseen_end()
    return count + (due is not None), due


class Preemption:
    """Cancels streams in flight for claims and starved requests (one per scheduler)."""

    __slots__ = ("_clock", "admission", "config", "recorder")

    def __init__(self, admission: Admission) -> None:
        """``admission``: the scheduler's (its quota classes pick the starved request); its
        config, clock and recorder are this one's too."""
        self.config = admission.config
        self._clock = admission.clock
        self.recorder = admission.recorder
        self.admission = admission

    def started(
        self, pool: Pool, policy: RequestPolicy, outcome: Any, within: bool, max_tokens: int = 0
    ) -> Running:
        """An admitted request starts (the stage): tracked until `Admission.finish`, so its
        output is charged as it streams and, when ``preempt_in_flight_after_s`` or
        ``preempt_streams_for_claims`` is set and it is a stream below `critical`, a starved
        request or a claim may cancel it. ``within``: it was admitted within its team's
        guarantee or nominal quota (a claim). A claim that took the pool over its limit
        cancels one stream without a claim (``preempt_streams_for_claims``). ``max_tokens``:
        the request's, to foresee its end (`ending`)."""
        pool.seq += 1
        config = self.config
        preempts = (
            config.preempt_in_flight_after_s is not None
            or config.preempt_streams_for_claims is not None
        )
        running = Running(
            policy, outcome, preempts and policy.rank > 0, pool.seq, within, max_tokens=max_tokens
        )
        pool.running[running] = None
        if (
            config.preempt_streams_for_claims is not None
            and (within or policy.rank == 0)
            and pool.over_limit()
        ):
            running.cut = self.reclaim(pool, policy, guarantee=within, claim=running)
        return running

    def reclaim(
        self,
        pool: Pool,
        claimant: RequestPolicy,
        guarantee: bool,
        queued: bool = False,
        claim: Running | None = None,
        ends: bool = True,
    ) -> Running | None:
        """``preempt_streams_for_claims``: a claim is over the pool's limit (or, ``queued``, a
        critical request queued): cancel one stream without a claim, unless the cancellations
        already on their way cover every claim over the limit (one victim per claim). A
        ``claim`` (started) that counts on a stream's end instead is checked again once that
        slot should have been its (`overdue`, which reclaims without ``ends``: it cuts).
        While a request given an ending stream's slot may wait in the engine, a started
        ``claim`` cancels that one first (`_early_taker`). Returns the stream cancelled here,
        if any."""
        mode = self.config.preempt_streams_for_claims
        limit = pool.limit
        if mode is None or limit is None:
            return None
        need = pool.over_limit() + pool.queue.depth()[0]
        now = self._clock()
        pending, due = _on_their_way(pool, now, queued, ends)
        if pending >= need:
            if claim is not None and due is not None and pending - 1 < need:
                claim.awaits = due  # it relies on that end
            return None
        borrowers = guarantee and mode == "borrowers"
        band = _claimable(pool, claimant, borrowers)
        victim = _early_taker(band) if claim is not None and pool.early else None
        if victim is None:
            victim = _victim_of(pool, band)
        if victim is not None:
            self._cancel(pool, victim, claimant, now)
        else:  # a fleet: the stream to cancel may be another process's (every one missing)
            pool.state.ask_elsewhere(claimant.rank, claimant.team, borrowers, need - pending)
        return victim

    def reclaim_for_owners(self, pool: Pool) -> None:
        """``preempt_streams_for_claims: borrowers`` with concurrency quotas: requests queued
        within their team's nominal (owners coming back for the share others borrowed)
        cancel borrowers' streams at once (`claim_victim`), one per owner the pool has no
        free slot for, less the cancellations already on their way; in a fleet the streams
        may be another process's (an order with the count still missing)."""
        quotas, limit = pool.quotas, pool.limit
        if (
            self.config.preempt_streams_for_claims != "borrowers"
            or quotas is None
            or limit is None
            or not pool.queue.size
        ):
            return
        owners: dict[str, list[Waiter]] = {}
        for waiter in pool.queue.waiters():  # highest band first
            if not waiter.future.done() and waiter.rank > 0:
                owners.setdefault(waiter.team, []).append(waiter)
        wanted = [(w, min(len(w), quotas.unused_nominal(t))) for t, w in owners.items()]
        need = sum(n for _, n in wanted)
        if need <= 0:
            return
        need -= max(0, limit - int(limit * pool.reserve) - pool.admitted)  # free: no cut
        now = self._clock()
        pending, _ = _on_their_way(pool, now, queued=True)
        for waiters, n in sorted(wanted, key=lambda x: x[0][0].rank):
            claimant = waiters[0].policy
            for _ in range(n):
                if pending >= need:
                    return
                victim = claim_victim(pool, claimant, True)
                if victim is None:  # a fleet: the borrowers' streams may be elsewhere
                    pool.state.ask_elsewhere(claimant.rank, claimant.team, True, need - pending)
                    return
                self._cancel(pool, victim, claimant, now)
                pending += 1

    def overdue(self, pool: Pool) -> None:
        """Claims that waited for another stream's end (`reclaim`) and have no output by when
        that slot should have been theirs (another claim took it, or the end came later than
        foreseen): each is reclaimed again counting no end, so it cuts a stream if the pool
        is still over its limit. Run at each poll and fleet sync."""
        now = self._clock()
        late = [r for r in pool.running if r.awaits and now >= r.awaits]
        for running in late:
            running.awaits = 0.0
            if running.outcome.relayed or running.cancel is not None or running.outcome.settled:
                continue
            self.reclaim(pool, running.policy, guarantee=running.within, ends=False)

    def relieve_starved(self, pool: Pool, after_s: float) -> None:
        """A queued request starved ``after_s`` (no room for it) cancels one stream in flight
        of a lower band, or, when its team is under its nominal quota, of a borrowing team of
        its band or lower: the newest of the lowest band. One cancellation at a time."""
        now = self._clock()
        for running in pool.running:
            if running.cancel is not None and now - running.cancel_at < CANCEL_GRACE_S:
                return  # the slot it frees is on its way
        quotas = pool.quotas
        if quotas is None:
            head = pool.queue.peek()
            if head is None or pool.room(head.rank, 0, head.policy.keeps_headroom):
                return
            owner = False
        else:
            classify = self.admission.classifier(pool, quotas, room=False)
            head = pool.queue.choose(classify, remember=False)
            if head is None or pool.room(head.rank, quotas.reserved_for(head.team)):
                return
            owner = quotas.status(head.team) == UNDER
        if now - head.enqueued < after_s:
            return
        victim = starved_victim(pool, head.rank, head.team, owner)
        if victim is not None:
            self._cancel(pool, victim, head.policy, now)
        else:  # a fleet: a stream another process serves may be cancelled for it
            pool.state.ask_elsewhere(head.rank, head.team, owner)

    def obey_order(self, pool: Pool, by: RequestPolicy, owner: bool, count: int) -> None:
        """Another process's order: cancel ``count`` streams here for ``by`` (`obey`), one
        fewer when a stream here is about to end (`ending`: its slot frees about as soon)."""
        for running in pool.running:
            if running.cancel is None and ending(running):
                count -= 1
                break
        for _ in range(count):  # each finds the next victim (one already cancelled is skipped)
            if not self.obey(pool, by, owner):
                return

    def obey(self, pool: Pool, by: RequestPolicy, owner: bool) -> bool:
        """Another process's starved request ``by`` (``owner``: its team under its nominal)
        asks this one to cancel a stream for it (`starved_victim`); False: none here now."""
        now = self._clock()
        victim = starved_victim(pool, by.rank, by.team, owner)
        if victim is None:
            return False
        self._cancel(pool, victim, by, now)
        return True

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
        self.recorder.preempted(pool, victim.policy, by)
        if requeued:
            self.recorder.decide(pool, victim.policy, 0, "requeued", 0.0, None, None)
        else:
            self.recorder.shed(
                pool, victim.policy, "preempted_in_flight", tokens=victim.outcome.relayed
            )


def starved_victim(pool: Pool, head_rank: int, head_team: str, owner: bool) -> Running | None:
    """The stream a starved request (band ``head_rank`` of ``head_team``) cancels: the newest
    of the lowest band below it, or, with ``owner`` (its team under its nominal), also a
    borrowing team's of its band that was not admitted within that team's own share; with
    ``engine_waiting`` or ``start_before_end`` one that holds an engine slot (`_holding`)."""
    quotas = pool.quotas
    band: list[Running] = []
    rank = -1
    for running in pool.running:
        if not cuttable(running):
            continue
        r = running.policy.rank
        lower = r > head_rank
        reclaim = (
            owner
            and not running.within  # a stream within its own team's share is not borrowed
            and quotas is not None
            and r >= head_rank
            and running.policy.team != head_team
            and quotas.status(running.policy.team, 0) == BORROWING
        )
        if not (lower or reclaim):
            continue
        if r > rank:
            band, rank = [running], r
        elif r == rank:
            band.append(running)
    if not band:
        return None
    held = _holding(band, pool.waiting + pool.early)
    return held if held is not None else band[-1]
