"""Admission into a pool: the fast path, the release of a slot, and who starts from the queue.

`Admission.try_admit` is the fast path, taken whenever nobody is queued and the pool has room:
no await, no allocation beyond the counter's float. A team under its guaranteed requests in
flight starts at once even over the limit (it reclaims what the others borrowed); with quotas,
a team past its borrowing limit (`CAPPED`) does not, and every team leaves the slots reserved
for the others' unlent nominal free.

`Admission.release` ends an admission (charging the output tokens) and `drain` starts what now
fits from the queue: without quotas the queue's own order (band, then fair share); with quotas,
within a band, teams within their guarantee first, then those `UNDER` their nominal, then the
borrowers, by counter. ``queue_pacing`` spaces those starts (`Pool.paced`).

Every count goes through the pool's `AdmissionState` (in flight, quotas, fair share).
"""

from __future__ import annotations

from collections.abc import Callable

from fleetgate.scheduling.config import BANDS, Band, SchedulingConfig
from fleetgate.scheduling.policy import BATCH_RANK, RANK, RequestPolicy
from fleetgate.scheduling.pool import Pool, Running
from fleetgate.scheduling.queue import Waiter
from fleetgate.scheduling.quota import CAPPED, UNDER
from fleetgate.scheduling.record import Recorder
from fleetgate.scheduling.state import AdmissionState, QuotaLedger

__all__ = ["Admission", "Classifier"]

# For `AdmissionQueue.choose`: a team's class for a band's rank (None: it may not start now).
Classifier = Callable[[str, int], int | None]


class Admission:
    """Who starts in a pool, and the charges of each admission (one per scheduler)."""

    __slots__ = ("clock", "config", "recorder")

    def __init__(
        self, config: SchedulingConfig, clock: Callable[[], float], recorder: Recorder
    ) -> None:
        self.config = config
        self.clock = clock  # the scheduler's; its other parts share it (`Preemption`, ...)
        self.recorder = recorder

    # ------------------------------------------------------------------ at once

    def try_admit(self, pool: Pool, policy: RequestPolicy, tokens: int) -> bool:
        """Admit at once when nobody waits and the pool has room (the fast path), or when the
        team is under its guaranteed requests in flight (even over the limit: it reclaims
        what the others borrowed)."""
        rank = RANK[policy.band]  # `RequestPolicy.rank`, without the call
        if rank == 0 and self.config.critical_reserve_hold_s is not None:
            pool.critical_seen = now = self.clock()
            pool.hold_reserve(now, self.config.critical_reserve_hold_s)
        state = pool.state
        quotas = state.quotas
        if quotas is None:
            if (
                pool.queue.size or not pool.room(rank, 0, policy.keeps_headroom)
            ) and not pool.within_guarantee(policy.team, policy.guaranteed):
                return False
        elif not pool.within_guarantee(policy.team, policy.guaranteed) and (
            pool.queue.size
            or quotas.status(policy.team) == CAPPED
            or not pool.room(rank, quotas.reserved_for(policy.team), policy.keeps_headroom)
        ):
            return False
        _admit(state, policy.team, tokens, policy.weight)
        return True

    def within(self, pool: Pool, policy: RequestPolicy) -> bool:
        """Whether a request about to start is within its team's guarantee or, with quotas,
        its nominal share (it gets the engine priority of an owner reclaiming its share)."""
        if pool.within_guarantee(policy.team, policy.guaranteed):
            return True
        quotas = pool.state.quotas
        return quotas is not None and quotas.status(policy.team) == UNDER

    def admitted_within(self, pool: Pool, policy: RequestPolicy) -> bool:
        """`within` for a request admitted from the queue (already counted): whether it
        started within its team's guarantee or nominal share. (Judged when it started, not
        when it arrived: a flood that arrived while its team was idle is not all "within",
        so the owner coming back finds the borrowed part to reclaim.)"""
        count = pool.teams.get(policy.team, 0)
        if 0 < count <= policy.guaranteed:
            return True
        quotas = pool.state.quotas
        return quotas is not None and quotas.status(policy.team, 0) == UNDER

    def idle(self, pool: Pool, band: Band) -> bool:
        """Whether ``pool`` has idle capacity for a request of ``band``: nobody queued (in any
        process of a fleet), the engines not signalling saturation, and room below the limit
        (and in this process's lease)."""
        if pool.queue.size or pool.signal or pool.state.queued_elsewhere:
            return False
        quotas = pool.state.quotas
        held = quotas.reserved_for("") if quotas is not None else 0
        rank = BANDS.index(band)
        return pool.room(rank, held, rank >= BATCH_RANK)  # the lane's lines are whole

    # ------------------------------------------------------------------ the end

    def release(
        self,
        pool: Pool,
        policy: RequestPolicy,
        output_tokens: int,
        held_s: float | None,
        slot: bool = True,
    ) -> None:
        """An admitted request ended: charge its output, free its slot (unless it was freed
        before, ``slot`` False), admit what fits."""
        state = pool.state
        if slot:
            state.give_back(policy.team)
        state.vtc.charge(
            policy.team, output_tokens * self.config.output_token_weight, policy.weight
        )
        if state.quotas is not None:
            state.quotas.charge(policy.team, output_tokens)
        if held_s is not None:
            pool.observe_service(held_s)
        if pool.queue.size:
            self.drain(pool)

    def finish(
        self, pool: Pool, running: Running, output_tokens: int, held_s: float | None
    ) -> None:
        """A request `started` ended: charge the output not charged yet, free its slot."""
        pool.running.pop(running, None)
        if running.released:
            pool.early -= 1
        if running.gone is not None and not running.gone.done():
            running.gone.set_result(None)  # a claim that cut it goes upstream now
        tokens = max(0, output_tokens - running.charged)
        self.release(pool, running.policy, tokens, held_s, slot=not running.released)

    def end_in_sight(self, pool: Pool, running: Running) -> None:
        """``running`` relayed its last chunk but one (`start_before_end`): its slot frees
        within about an engine step, so it goes to the next request now, which then reaches
        the engine before that step ends. At most ``start_before_end`` such streams of the
        pool at once here; not one cancelled (its slot is freed by the cancellation)."""
        if (
            running.released
            or running.cancel is not None
            or pool.early >= self.config.start_before_end
            or running not in pool.running
        ):
            return
        running.released = True
        pool.early += 1
        pool.state.give_back(running.policy.team)
        if pool.queue.size:
            self.drain(pool)

    def charge_progress(self, pool: Pool) -> None:
        """Charge the output each stream sent since the last poll (fair share, rates)."""
        weight = self.config.output_token_weight
        state = pool.state
        quotas = state.quotas
        for running in pool.running:
            sent = running.outcome.relayed
            if sent > running.charged:
                delta = sent - running.charged
                running.charged = sent
                policy = running.policy
                state.vtc.charge(policy.team, delta * weight, policy.weight)
                if quotas is not None:
                    quotas.charge(policy.team, delta)

    # ------------------------------------------------------------------ from the queue

    def drain(self, pool: Pool) -> None:
        """Start the queued requests that now fit, in the queue's order."""
        quotas = pool.state.quotas
        if quotas is not None:
            self._drain_quotas(pool, quotas)
            return
        queue = pool.queue
        while queue.size:
            head = queue.peek()
            if (
                head is None
                or not pool.room(head.rank, 0, head.policy.keeps_headroom)
                or not self._paced(pool, head)
            ):
                return
            waiter = queue.pop()
            if waiter is None:
                return
            if waiter.future.done():  # cancelled in the meantime: it holds nothing
                pool.pace_tokens += 1.0  # it did not start
                continue
            self._grant(pool, waiter)

    def _drain_quotas(self, pool: Pool, quotas: QuotaLedger) -> None:
        queue = pool.queue
        classify = self.classifier(pool, quotas, room=True)
        while queue.size:
            waiter = queue.choose(classify, remember=False)
            if waiter is None:
                return
            if waiter.policy.keeps_headroom and not pool.room(
                waiter.rank, quotas.reserved_for(waiter.team), True
            ):
                return  # a whole batch-band response waits for room beside the headroom
            if not self._paced(pool, waiter):
                return
            pool.state.vtc.fairest((waiter.team,))  # remembered as served last
            queue.remove(waiter)
            if not waiter.future.done():
                self._grant(pool, waiter)

    def classifier(self, pool: Pool, quotas: QuotaLedger, room: bool) -> Classifier:
        """For `AdmissionQueue.choose`: a team's class (-1 within its guarantee, then `UNDER`,
        `BORROWING`), None while it may not start (capped, or, with ``room``, no room left
        for it beside the others' reserved slots)."""
        teams = self.config.teams

        def classify(team: str, rank: int) -> int | None:
            policy = teams.get(team)
            guaranteed = policy.guaranteed if policy is not None else 0
            if pool.within_guarantee(team, guaranteed):
                return -1
            status = quotas.status(team)
            if status == CAPPED or (room and not pool.room(rank, quotas.reserved_for(team))):
                return None
            return status

        return classify

    def _paced(self, pool: Pool, waiter: Waiter) -> bool:
        """``queue_pacing``: whether ``waiter`` may start now. The critical band and requests
        within their team's guarantee are never held back."""
        factor = self.config.queue_pacing
        if factor is None or waiter.rank == 0:
            return True
        if pool.within_guarantee(waiter.team, waiter.policy.guaranteed):
            return True
        return pool.paced(self.clock(), factor, self.config.poll_interval_s)

    def _grant(self, pool: Pool, waiter: Waiter) -> None:
        policy = waiter.policy
        _admit(pool.state, policy.team, waiter.tokens, policy.weight)
        waiter.future.set_result(None)
        self.recorder.granted(pool, policy, self.clock() - waiter.enqueued)


def _admit(state: AdmissionState, team: str, tokens: int, weight: float) -> None:
    """One more request of ``team`` in flight; its prompt charged (fair share, rates)."""
    state.take(team)
    state.vtc.charge(team, tokens, weight)
    if state.quotas is not None:
        state.quotas.charge(team, tokens)
