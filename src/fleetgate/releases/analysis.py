"""Rollout analysis: the candidate against the baseline on what the gateway already records.

Each request's spend record carries its alias, the version of the deployment that answered, its
status and its latency. For one step, the candidate's records since the step began are compared
with the baseline's since the rollout began (at 100% the baseline gets no traffic any more):

- fewer than ``min_samples`` requests of either: **extend** the step (too few samples is not a
  failure; it is judged again one interval later on the larger window);
- error rate (status >= 500) above the baseline's by more than ``max_error_rate_delta``, or
  latency p95 above ``max_latency_ratio`` times the baseline's: **fail**;
- else **pass**.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select

from fleetgate.releases.config import RolloutConfig
from fleetgate.releases.stats import percentile
from fleetgate.store.database import Database
from fleetgate.store.tables import spend

__all__ = ["Judgement", "Window", "judge_step", "window"]


@dataclass(frozen=True)
class Window:
    requests: int
    errors: int
    latency_p95_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Judgement:
    verdict: Literal["pass", "fail", "extend"]
    reason: str
    candidate: Window
    baseline: Window


async def window(db: Database, alias: str, version: str, since_ms: int) -> Window:
    """``version``'s requests on ``alias`` since ``since_ms``."""
    stmt = select(spend.c.status, spend.c.latency_ms).where(
        spend.c.alias == alias, spend.c.version == version, spend.c.created_ms >= since_ms
    )
    async with db.engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    latencies = [float(r.latency_ms) for r in rows]
    errors = sum(1 for r in rows if r.status >= 500)
    return Window(len(rows), errors, percentile(latencies, 95))


def judge_step(
    candidate: Window, baseline: Window, config: RolloutConfig, min_samples: int
) -> Judgement:
    if candidate.requests < min_samples or baseline.requests < min_samples:
        return Judgement(
            "extend",
            f"too few samples (candidate {candidate.requests}, baseline {baseline.requests}, "
            f"need {min_samples} each): the step is extended",
            candidate, baseline,
        )  # fmt: skip
    limit = baseline.error_rate + config.max_error_rate_delta
    if candidate.error_rate > limit:
        return Judgement(
            "fail",
            f"error rate {candidate.error_rate:.1%} > baseline {baseline.error_rate:.1%} "
            f"+ {config.max_error_rate_delta:.1%}",
            candidate, baseline,
        )  # fmt: skip
    c, b = candidate.latency_p95_ms, baseline.latency_p95_ms
    if c is not None and b is not None and b > 0 and c > b * config.max_latency_ratio:
        return Judgement(
            "fail",
            f"latency p95 {c:.0f} ms > {config.max_latency_ratio:g}x baseline {b:.0f} ms",
            candidate, baseline,
        )  # fmt: skip
    return Judgement(
        "pass",
        f"error rate {candidate.error_rate:.1%} (baseline {baseline.error_rate:.1%}), latency "
        f"p95 {c or 0:.0f} ms (baseline {b or 0:.0f} ms), {candidate.requests} requests",
        candidate, baseline,
    )  # fmt: skip
