"""`RolloutDriver`: advances or rolls back running rollouts, one replica per rollout.

Every replica runs the loop; each tick it takes or renews the lease of each running rollout
(`RolloutStore.lease`), and only the holder judges it, once per ``interval_s`` of the rollout
(`fleetgate.releases.analysis`):

- **extend**: recorded, judged again one interval later (too few samples is not a failure);
- **inconclusive** (a rule over its limit, not significantly): extended likewise; after
  ``max_inconclusive`` in a row on one step the rollout is paused with the reason and the alert
  webhook told: a person resumes (the count starts over) or aborts it. Never rolled back on it;
- **fail**: traffic to the candidate goes to 0% at once (status ``rolled_back``), which every
  replica applies at its next registry poll; audited and sent to the alert webhook;
- **pass**: the next step; after the last (100%) the candidate is promoted to ``production``
  (compare-and-set from the baseline), the baseline becoming ``previous``.

A replica that dies stops renewing its lease; another takes over after ``lease_s``. The state
is in the database, so config reloads and gateway restarts do not lose a rollout.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fleetgate.errors import Conflict
from fleetgate.releases.analysis import judge_step, window
from fleetgate.releases.config import RolloutConfig
from fleetgate.releases.registry import Registry
from fleetgate.releases.rollouts import Rollout, RolloutStore
from fleetgate.tasks import RunsInBackground, periodic

__all__ = ["RolloutDriver"]

log = logging.getLogger("fleetgate.releases.rollout")

Notify = Callable[[str, Rollout], Awaitable[None]]


class RolloutDriver(RunsInBackground):
    def __init__(
        self,
        store: RolloutStore,
        registry: Registry,
        config: Callable[[], RolloutConfig],
        *,
        owner: str,
        notify: Notify,
        changed: Callable[[], Awaitable[None]],
    ) -> None:
        self.store = store
        self.registry = registry
        self.config = config
        self.owner = owner
        self.notify = notify  # audit + webhook of a decision that changed the rollout
        self.changed = changed  # apply a change here at once
        # the store may be away: logged, tried again next tick
        self._task = periodic(lambda: self.config().tick_s, self.tick, log, "rollout tick failed")

    async def tick(self) -> None:
        for rollout in await self.store.all():
            if rollout.status == "running":
                await self._drive(rollout)

    async def _drive(self, r: Rollout) -> None:
        cfg = self.config()
        if not await self.store.lease(r.alias, self.owner, cfg.lease_s):
            return  # another replica drives it
        now = self.store.clock()
        if now - max(r.step_started_ms, r.updated_ms) < r.interval_s * 1000:
            return
        db = self.store.db
        regen = cfg.regeneration_window_s
        candidate = await window(db, r.alias, r.candidate, r.step_started_ms, regen)
        baseline = await window(db, r.alias, r.baseline, r.started_ms, regen)
        judgement = judge_step(candidate, baseline, cfg, r.min_samples)
        decision: dict[str, Any] = {
            "at_ms": now, "step": r.step, "percent": r.percent, "verdict": judgement.verdict,
            "reason": judgement.reason, "candidate": candidate.to_dict(),
            "baseline": baseline.to_dict(), "by": self.owner,
        }  # fmt: skip
        decisions = [*r.decisions, decision][-100:]
        if judgement.verdict == "inconclusive" and _unsure_in_a_row(decisions, r.step) >= (
            cfg.max_inconclusive
        ):
            reason = (
                f"inconclusive {cfg.max_inconclusive} times in a row at {r.percent:g}% "
                f"({judgement.reason}): a person decides (resume or abort)"
            )
            new = await self.store.change(r, status="paused", reason=reason, decisions=decisions)
        elif judgement.verdict in ("extend", "inconclusive"):
            new = await self.store.change(r, decisions=decisions)
        elif judgement.verdict == "fail":
            new = await self.store.change(
                r, status="rolled_back", percent=0.0, reason=judgement.reason, decisions=decisions
            )
        elif r.step + 1 < len(r.steps):
            new = await self.store.change(
                r, step=r.step + 1, percent=r.steps[r.step + 1], step_started_ms=now,
                decisions=decisions,
            )  # fmt: skip
        else:
            new = await self._complete(r, decisions)
        if new is None:
            return  # changed meanwhile (paused, aborted): judged again next tick
        log.info("rollout %s: %s (%s)", r.alias, judgement.verdict, judgement.reason)
        await self.changed()
        if new.status != "running" or new.step != r.step:
            await self.notify(f"rollout.{new.status if new.status != 'running' else 'step'}", new)

    async def _complete(self, r: Rollout, decisions: list[dict[str, Any]]) -> Rollout | None:
        try:
            await self.registry.promote(
                r.model, "production", r.candidate, actor=f"rollout:{self.owner}",
                expected=r.baseline, detail={"rollout": r.alias, "decisions": len(decisions)},
            )  # fmt: skip
        except Conflict as exc:
            return await self.store.change(
                r, status="aborted", reason=f"could not promote: {exc.message}",
                decisions=decisions,
            )  # fmt: skip
        return await self.store.change(r, status="completed", percent=100.0, decisions=decisions)


def _unsure_in_a_row(decisions: list[dict[str, Any]], step: int) -> int:
    """Inconclusive verdicts at ``step`` since its last other verdict (a resume starts over)."""
    n = 0
    for d in reversed(decisions):
        if d.get("step") != step or d.get("verdict") != "inconclusive":
            break
        n += 1
    return n
