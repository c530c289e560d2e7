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
- **fail** when any of these holds *significantly* (all that do are named in the reason):
  error rate (failed attempts / attempts) above the baseline's by more than
  ``max_error_rate_delta`` (one-sided two-proportion test); latency, TTFT or TPOT p95 above
  ``max(ratio x baseline, baseline + floor)`` (``max_latency_ratio`` / ``latency_floor_ms``,
  and the TTFT and TPOT pairs; tested as the candidate's share of observations over that limit
  against the 5% a p95 allows, one-sided binomial); guardrail block rate above the baseline's
  by more than ``max_block_rate_delta``; negative-feedback rate above the baseline's by more
  than ``max_negative_feedback_delta`` (both two-proportion tests). Significant means a
  p-value under ``significance`` (0.05: the limits themselves are the margin for what matters,
  the test only keeps noise from failing a step);
- **inconclusive** when a rule's estimate is over its limit but not significantly: the step is
  extended, never failed on it; after ``max_inconclusive`` of them in a row the driver pauses
  the rollout for a person;
  TTFT and TPOT are judged only when both sides have ``min_samples`` of them (streams), and
  feedback only when both have ``min_feedback`` verdicts; otherwise the reason says so;
- else **pass**.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

from sqlalchemy import and_, case, func, or_, select

from fleetgate.releases.config import RolloutConfig
from fleetgate.releases.feedback import NEGATIVE_BELOW, asked_again
from fleetgate.releases.tables import feedback, release_requests
from fleetgate.releases.windows import VersionWindow, read_window
from fleetgate.store.database import Database

__all__ = ["Judgement", "VersionWindow", "exceeds", "judge_step", "window"]

_P95_TAIL = 0.05  # the share of observations a p95 leaves above itself


@dataclass(frozen=True)
class Judgement:
    verdict: Literal["pass", "fail", "extend", "inconclusive"]
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


def exceeds(
    over: float, n_over: int, base: float, n_base: int, delta: float, significance: float
) -> bool:
    """Whether a share ``over`` of ``n_over`` exceeds ``base`` of ``n_base`` by more than
    ``delta`` significantly (one-sided two-proportion z-test, unpooled; a side without
    observations counts as exact)."""
    var = (over * (1 - over) / n_over if n_over else 0.0) + (
        base * (1 - base) / n_base if n_base else 0.0
    )
    excess = over - base - delta
    if var <= 0:
        return excess > 0
    return excess / math.sqrt(var) > NormalDist().inv_cdf(1 - significance)


def _rate_rule(
    name: str, c: tuple[int, int], b: tuple[int, int], delta: float, significance: float
) -> tuple[str | None, bool, str]:
    """(a failure, inconclusive, a note) for ``name``: candidate ``c`` = (hits, n) against
    baseline ``b`` plus ``delta``."""
    cr = c[0] / c[1] if c[1] else 0.0
    br = b[0] / b[1] if b[1] else 0.0
    note = f"{name} {cr:.1%} (baseline {br:.1%})"
    if cr <= br + delta:
        return None, False, note
    if exceeds(cr, c[1], br, b[1], delta, significance):
        return f"{name} {cr:.1%} > baseline {br:.1%} + {delta:.1%}", False, note
    return None, True, f"{note}: over the limit, not significantly"


def _p95_rule(
    name: str,
    hist: str,
    c: VersionWindow,
    b: VersionWindow,
    limits: tuple[float, float],
    samples: tuple[int, int] | None,
    min_samples: int,
    significance: float,
) -> tuple[str | None, bool, str]:
    """(a failure, inconclusive, a note) for one p95 rule: over ``max(ratio x baseline,
    baseline + floor)``, tested on the candidate's histogram when it was kept."""
    cv, bv = getattr(c, f"{hist}_p95_ms"), getattr(b, f"{hist}_p95_ms")
    if samples is not None and min(samples) < min_samples:
        return None, False, f"{name} not judged ({samples[0]}/{samples[1]} samples)"
    if cv is None or bv is None or bv <= 0:
        return None, False, f"{name} not measured"
    ratio, floor = limits
    limit = max(bv * ratio, bv + floor)
    note = f"{name} p95 {cv:.0f} ms (baseline {bv:.0f} ms)"
    if cv <= limit:
        return None, False, note
    failure = (
        f"{name} p95 {cv:.0f} ms > {limit:.0f} ms "
        f"({ratio:g}x baseline {bv:.0f} ms, floor +{floor:g} ms)"
    )
    counted = c.share_over(hist, limit)
    if counted is None:  # no histogram kept (a window built by hand): the estimate decides
        return failure, False, note
    over, n = counted
    if n and exceeds(over / n, n, _P95_TAIL, 0, 0.0, significance):
        return failure, False, note
    return None, True, f"{note}: over {limit:.0f} ms, not significantly ({over} of {n})"


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
    unsure: list[str] = []

    def rule(outcome: tuple[str | None, bool, str]) -> None:
        failure, inconclusive, note = outcome
        if failure:
            failures.append(failure)
        if inconclusive:
            unsure.append(note)
        notes.append(note)

    alpha = config.significance
    errors = ((c.failed_attempts, c.attempts), (b.failed_attempts, b.attempts))
    rule(_rate_rule("error rate", *errors, config.max_error_rate_delta, alpha))
    for name, hist, limits, samples in (
        ("latency", "latency", (config.max_latency_ratio, config.latency_floor_ms), None),
        ("TTFT", "ttft", (config.max_ttft_ratio, config.ttft_floor_ms),
         (c.ttft_samples, b.ttft_samples)),
        ("TPOT", "tpot", (config.max_tpot_ratio, config.tpot_floor_ms),
         (c.tpot_samples, b.tpot_samples)),
    ):  # fmt: skip
        rule(_p95_rule(name, hist, c, b, limits, samples, min_samples, alpha))
    rule(_rate_rule("guardrail block rate", (c.blocked, c.requests), (b.blocked, b.requests),
                    config.max_block_rate_delta, alpha))  # fmt: skip
    if min(c.feedback, b.feedback) >= config.min_feedback:
        rule(_rate_rule("negative feedback", (c.negative, c.feedback), (b.negative, b.feedback),
                        config.max_negative_feedback_delta, alpha))  # fmt: skip
    else:
        notes.append(f"feedback not judged ({c.feedback}/{b.feedback} verdicts)")
    if failures:
        return Judgement("fail", "; ".join(failures), c, b)
    if unsure:
        return Judgement("inconclusive", f"{'; '.join(unsure)}: the step is extended", c, b)
    return Judgement("pass", f"{', '.join(notes)}, {c.requests} requests", c, b)
