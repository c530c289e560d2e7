"""Which stream in flight a claim cancels (``preempt_streams_for_claims``).

A *claim* is a request of the `critical` band, or one within its team's ``guaranteed``
requests in flight or its nominal quota. vLLM v1 never preempts a running sequence to give a
slot to a more important one, so a claim that takes the pool over its limit would wait in the
engine for a stream to end; the scheduler instead cancels one stream that has no claim: the
upstream request is aborted, which frees the engine's slot, and the client gets a retryable
in-stream error and is billed for what it received (or, before its first byte, the request
is requeued).

Example::

    victim = claim_victim(pool, critical_policy, borrowers=False)
    if victim is not None:
        ...  # the scheduler cancels it: victim.abort(error) ends the request now
"""

from __future__ import annotations

from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool, Running
from fleetgate.scheduling.quota import BORROWING

__all__ = ["claim_victim"]


def claim_victim(pool: Pool, claimant: RequestPolicy, borrowers: bool) -> Running | None:
    """The stream a claim of ``claimant`` cancels: one in flight that may be cancelled, is
    not cancelled yet and has no claim of its own (admitted outside its team's guarantee and
    nominal quota), of a lower band, or, with ``borrowers``, of the claimant's band and
    another team that is borrowing (no quota, or over its nominal). The lowest band first,
    then the one that has sent the least output (the least work lost), then the newest."""
    quotas = pool.quotas
    best: Running | None = None
    best_key: tuple[int, int, int] = (0, 0, 0)
    for running in pool.running:
        if (
            not running.cancellable
            or running.cancel is not None
            or running.within
            or running.outcome.settled  # its response is complete: it ends on its own
        ):
            continue
        victim = running.policy
        if victim.rank <= claimant.rank and not (
            borrowers
            and victim.rank == claimant.rank
            and victim.team != claimant.team
            and (quotas is None or quotas.status(victim.team, 0) == BORROWING)
        ):
            continue
        key = (victim.rank, -running.outcome.relayed, running.seq)
        if best is None or key > best_key:
            best, best_key = running, key
    return best
