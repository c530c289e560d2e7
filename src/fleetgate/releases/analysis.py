"""Rollout analysis: the candidate against the baseline, version against version.

The evidence is what every replica recorded of each version (`fleetgate.releases.outcomes`):
requests, failed requests and failed upstream attempts (also for requests where every attempt
failed, which have no spend record), output guardrail blocks, latency / TTFT / TPOT
histograms; and users' verdicts on those requests (explicit feedback, plus regenerations: the
same prompt asked again by the same key counts as an implicit thumbs down on the first
answer). For one step, the candidate's since the step began is compared with the baseline's
since the rollout began (at 100% the baseline gets no traffic any more):

- fewer than ``min_samples`` requests of either: **extend** the step (too few samples is not a
  failure: it is judged again one interval later on the larger window);
- **fail** when any of these holds (all that hold are named in the reason):
  error rate (failed attempts / attempts) above the baseline's by more than
  ``max_error_rate_delta``; latency, TTFT or TPOT p95 above ``max_latency_ratio`` /
  ``max_ttft_ratio`` / ``max_tpot_ratio`` times the baseline's; guardrail block rate above
  the baseline's by more than ``max_block_rate_delta``; negative-feedback rate above the
  baseline's by more than ``max_negative_feedback_delta``.
  TTFT and TPOT are judged only when both sides have ``min_samples`` of them (streams), and
  feedback only when both have ``min_feedback`` verdicts; otherwise the reason says so;
- else **pass**.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from sqlalchemy import and_, case, func, or_, select

from fleetgate.releases.config import RolloutConfig
from fleetgate.releases.feedback import NEGATIVE_BELOW, asked_again
from fleetgate.releases.outcomes import VersionWindow, read_window
from fleetgate.releases.tables import feedback, release_requests
from fleetgate.store.database import Database

__all__ = ["Judgement", "VersionWindow", "judge_step", "window"]


@dataclass(frozen=True)
class Judgement:
    verdict: Literal["pass", "fail", "extend"]
    reason: str
    candidate: VersionWindow
    baseline: VersionWindow


async def window(
    db: Database, alias: str, version: str, since_ms: int, regen_window_s: float = 600.0
) -> VersionWindow:
    """``version``'s requests on ``alias`` since ``since_ms``, with their feedback."""
    counted = await read_window(db, alias, version, since_ms)
    verdicts, negative = await feedback_counts(db, alias, version, since_ms, regen_window_s)
    return replace(counted, feedback=verdicts, negative=negative)


async def feedback_counts(
    db: Database, alias: str, version: str, since_ms: int, regen_window_s: float
) -> tuple[int, int]:
    """(verdicts, negative verdicts) on ``version``'s requests since ``since_ms``: explicit
    feedback (a key of another team than the request's does not count) plus regenerations."""
    r = release_requests
    same_team = or_(feedback.c.team_id.is_(None), feedback.c.team_id == r.c.team_id)
    explicit = (
        select(func.count(), func.sum(case((feedback.c.score < NEGATIVE_BELOW, 1), else_=0)))
        .select_from(feedback.join(r, and_(r.c.request_id == feedback.c.request_id, same_team)))
        .where(r.c.alias == alias, r.c.version == version, r.c.created_ms >= since_ms)
    )
    regenerated = (
        select(func.count())
        .select_from(r)
        .where(r.c.alias == alias, r.c.version == version, r.c.created_ms >= since_ms)
        .where(asked_again(regen_window_s))
    )
    async with db.engine.connect() as conn:
        n, neg = (await conn.execute(explicit)).one()
        regen = (await conn.execute(regenerated)).scalar_one()
    return int(n or 0) + int(regen), int(neg or 0) + int(regen)


def _ratio(
    name: str,
    c: float | None,
    b: float | None,
    limit: float,
    samples: tuple[int, int] | None,
    min_samples: int,
) -> tuple[str | None, str]:
    """(a failure, a note) for one p95 ratio rule."""
    if samples is not None and min(samples) < min_samples:
        return None, f"{name} not judged ({samples[0]}/{samples[1]} samples)"
    if c is None or b is None or b <= 0:
        return None, f"{name} not measured"
    note = f"{name} p95 {c:.0f} ms (baseline {b:.0f} ms)"
    if c > b * limit:
        return f"{name} p95 {c:.0f} ms > {limit:g}x baseline {b:.0f} ms", note
    return None, note


def judge_step(
    candidate: VersionWindow, baseline: VersionWindow, config: RolloutConfig, min_samples: int
) -> Judgement:
    c, b = candidate, baseline
    if c.requests < min_samples or b.requests < min_samples:
        return Judgement(
            "extend",
            f"too few samples (candidate {c.requests}, baseline {b.requests}, "
            f"need {min_samples} each): the step is extended",
            c, b,
        )  # fmt: skip
    failures: list[str] = []
    notes: list[str] = []
    if c.error_rate > b.error_rate + config.max_error_rate_delta:
        failures.append(
            f"error rate {c.error_rate:.1%} > baseline {b.error_rate:.1%} "
            f"+ {config.max_error_rate_delta:.1%}"
        )
    notes.append(f"error rate {c.error_rate:.1%} (baseline {b.error_rate:.1%})")
    for name, cv, bv, limit, samples in (
        ("latency", c.latency_p95_ms, b.latency_p95_ms, config.max_latency_ratio, None),
        ("TTFT", c.ttft_p95_ms, b.ttft_p95_ms, config.max_ttft_ratio,
         (c.ttft_samples, b.ttft_samples)),
        ("TPOT", c.tpot_p95_ms, b.tpot_p95_ms, config.max_tpot_ratio,
         (c.tpot_samples, b.tpot_samples)),
    ):  # fmt: skip
        failure, note = _ratio(name, cv, bv, limit, samples, min_samples)
        if failure:
            failures.append(failure)
        notes.append(note)
    if c.block_rate > b.block_rate + config.max_block_rate_delta:
        failures.append(
            f"guardrail block rate {c.block_rate:.1%} > baseline {b.block_rate:.1%} "
            f"+ {config.max_block_rate_delta:.1%}"
        )
    notes.append(f"block rate {c.block_rate:.1%} (baseline {b.block_rate:.1%})")
    if min(c.feedback, b.feedback) >= config.min_feedback:
        limit = b.negative_rate + config.max_negative_feedback_delta
        if c.negative_rate > limit:
            failures.append(
                f"negative feedback {c.negative_rate:.1%} > baseline {b.negative_rate:.1%} "
                f"+ {config.max_negative_feedback_delta:.1%}"
            )
        notes.append(f"negative feedback {c.negative_rate:.1%} (baseline {b.negative_rate:.1%})")
    else:
        notes.append(f"feedback not judged ({c.feedback}/{b.feedback} verdicts)")
    if failures:
        return Judgement("fail", "; ".join(failures), c, b)
    return Judgement("pass", f"{', '.join(notes)}, {c.requests} requests", c, b)
