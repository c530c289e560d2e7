"""The ``releases:`` config section (an alias's ``registry:`` field, which follows a stage, is
the ground floor's `fleetgate.config.schema.RegistryRef`).

Example (YAML)::

    models:
      - alias: chat
        registry: {model: chat, stage: production}   # deployments come from the registry
    releases:
      poll_interval_s: 0.5
      retention: 3
      gates:
        chat:
          rules:
            - {metric: golden, min_delta: -0.01}      # golden >= baseline - 1 point
            - {metric: red-team, min: 0.98}           # refusal rate on red-team items
            - {metric: ttft_p95_ms, max_ratio: 1.1}   # TTFT p95 <= 1.1x baseline
        chat-int4:
          rules:
            - {metric: golden, pass_drop: 0.02, fail_drop: 0.05, baseline: parent}  # Q14
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetgate.config.sections import Section

__all__ = [
    "RELEASES_SECTION",
    "GateConfig",
    "GateRule",
    "ReleasesConfig",
    "RolloutConfig",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GateRule(_Model):
    """One rule of a gate, on one metric of the candidate's evaluation runs.

    Exactly one kind: ``min`` / ``max`` (absolute bounds, may be combined), ``min_delta``
    (candidate - baseline >= min_delta), ``max_ratio`` (candidate <= baseline * max_ratio), or
    ``pass_drop`` with ``fail_drop`` (relative drop below pass_drop passes, above fail_drop
    fails, between is inconclusive). ``baseline``: the version compared with, the one at
    ``production`` or the candidate's ``parent_version`` (the quantization gate).
    """

    # the evaluation metric the rule judges (golden, red-team, ttft_p95_ms, ...)
    metric: str = Field(min_length=1, max_length=64)
    # the rule's name in verdicts (default: derived from the metric and bounds)
    name: str | None = None
    # the candidate's value must be at least this
    min: float | None = None
    # the candidate's value must be at most this
    max: float | None = None
    # candidate - baseline must be at least this
    min_delta: float | None = None
    # candidate must be at most baseline x this
    max_ratio: float | None = Field(None, gt=0)
    # a relative drop below this passes (with fail_drop)
    pass_drop: float | None = Field(None, ge=0)
    # a relative drop above this fails; between pass_drop and it is inconclusive
    fail_drop: float | None = Field(None, ge=0)
    # the version compared with: the one at production, or the candidate's parent_version
    baseline: Literal["production", "parent"] = "production"

    @model_validator(mode="after")
    def _one_kind(self) -> GateRule:
        kinds = [
            self.min is not None or self.max is not None,
            self.min_delta is not None,
            self.max_ratio is not None,
            self.pass_drop is not None or self.fail_drop is not None,
        ]
        if sum(kinds) != 1:
            raise ValueError(
                "a gate rule needs exactly one of: min/max, min_delta, max_ratio, "
                "pass_drop with fail_drop"
            )
        if (self.pass_drop is None) != (self.fail_drop is None):
            raise ValueError("pass_drop and fail_drop go together")
        if self.pass_drop is not None and self.fail_drop is not None:
            if self.fail_drop < self.pass_drop:
                raise ValueError("fail_drop must be >= pass_drop")
        return self

    @property
    def label(self) -> str:
        return self.name or self.metric


class GateConfig(_Model):
    """The gate of one registry model: every rule must pass for promotion to production."""

    # the rules of that model's gate: each `{metric, name?, min?, max?, min_delta?, max_ratio?,
    # pass_drop?, fail_drop?, baseline: production\
    rules: tuple[GateRule, ...] = ()


class RolloutConfig(_Model):
    """How progressive rollouts are driven and judged (docs/releases.md)."""

    # how often each replica's driver looks at running rollouts (and renews its leases)
    tick_s: float = Field(1.0, gt=0, le=60)
    # how long a replica's lease on driving a rollout lasts without renewal (another takes over
    # after it)
    lease_s: float = Field(5.0, gt=0, le=600)
    # a step fails when the candidate's error rate exceeds the baseline's by more than this
    max_error_rate_delta: float = Field(0.02, ge=0, le=1)
    # a step fails when the candidate's latency p95 (whole request) exceeds this times the
    # baseline's
    max_latency_ratio: float = Field(1.5, gt=1)
    # a step fails when the candidate's TTFT p95 exceeds this times the baseline's (judged with
    # `min_samples` streams on both sides)
    max_ttft_ratio: float = Field(1.5, gt=1)
    # the same for TPOT p95
    max_tpot_ratio: float = Field(1.5, gt=1)
    # absolute floors: a p95 is judged slower only when it also exceeds the baseline's by this
    # much (milliseconds of noise on a fast engine never fail a build)
    latency_floor_ms: float = Field(50.0, ge=0)
    # the same floor for TTFT p95
    ttft_floor_ms: float = Field(50.0, ge=0)
    # the same floor for TPOT p95
    tpot_floor_ms: float = Field(5.0, ge=0)
    # a rule fails a step only when its excess over its limit is significant at this level
    # (one-sided: errors, two proportions; latencies, the candidate's share over the limit
    # against 5%); over the limit but not significant is inconclusive: the step is extended
    significance: float = Field(0.05, gt=0, lt=0.5)
    # inconclusive judgements in a row on one step before the rollout pauses for a person
    # (`fleetgate rollout resume|abort`); it is never rolled back on an inconclusive verdict
    max_inconclusive: int = Field(10, ge=1, le=1000)
    # a step fails when the candidate's output guardrail block rate exceeds the baseline's by more
    # than this
    max_block_rate_delta: float = Field(0.02, ge=0, le=1)
    # a step fails when the candidate's negative-feedback rate (regenerations included) exceeds the
    # baseline's by more than this
    max_negative_feedback_delta: float = Field(0.05, ge=0, le=1)
    # verdicts both sides need before negative feedback is judged
    min_feedback: int = Field(20, ge=1)
    # the same prompt from the same key within this is a regeneration
    regeneration_window_s: float = Field(600.0, gt=0, le=86400)
    # how often each replica writes its outcome counts and request rows
    flush_s: float = Field(1.0, gt=0, le=60)
    # URL that gets a JSON POST for each rollout decision that changed it (rolled back, step,
    # completed)
    alert_webhook: str | None = None


class ReleasesConfig(_Model):
    """The registry's behaviour on every replica."""

    # how often each replica reads the registry's change counter (a promotion reaches every replica
    # within about this plus one read)
    poll_interval_s: float = Field(0.5, gt=0, le=10)
    # how many of the last production versions stay `ready`; older ones no stage holds are archived
    retention: int = Field(3, ge=1, le=100)
    # serve every ready version of a followed model as `<alias>@<version>` (what `fleetgate eval run
    # --target` uses)
    version_aliases: bool = True
    # gate rules by registry model name
    gates: dict[str, GateConfig] = Field(default_factory=dict)
    # how progressive rollouts step and are judged
    rollout: RolloutConfig = RolloutConfig()
    record_requests: bool = True  # a row per request of registry aliases (feedback, flywheel)
    # how long those rows are kept (outcome rows: 7 days)
    requests_retention_s: int = Field(30 * 86400, ge=60)


RELEASES_SECTION = Section("releases", ReleasesConfig, reload={"": "live"})
"""The ``releases`` section: registry polling, retention, gates."""
