"""The ``releases:`` config section and the ``registry:`` field of an alias.

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

__all__ = [
    "GateConfig",
    "GateRule",
    "NAME_PATTERN",
    "RegistryRef",
    "ReleasesConfig",
    "RolloutConfig",
]

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"  # model, version and stage names


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RegistryRef(_Model):
    """An alias that serves whatever version of ``model`` is at ``stage`` right now."""

    model: str = Field(pattern=NAME_PATTERN)
    stage: str = Field("production", pattern=NAME_PATTERN)


class GateRule(_Model):
    """One rule of a gate, on one metric of the candidate's evaluation runs.

    Exactly one kind: ``min`` / ``max`` (absolute bounds, may be combined), ``min_delta``
    (candidate - baseline >= min_delta), ``max_ratio`` (candidate <= baseline * max_ratio), or
    ``pass_drop`` with ``fail_drop`` (relative drop below pass_drop passes, above fail_drop
    fails, between is inconclusive). ``baseline``: the version compared with, the one at
    ``production`` or the candidate's ``parent_version`` (the quantization gate).
    """

    metric: str = Field(min_length=1, max_length=64)
    name: str | None = None
    min: float | None = None
    max: float | None = None
    min_delta: float | None = None
    max_ratio: float | None = Field(None, gt=0)
    pass_drop: float | None = Field(None, ge=0)
    fail_drop: float | None = Field(None, ge=0)
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

    rules: tuple[GateRule, ...] = ()


class RolloutConfig(_Model):
    """How progressive rollouts are driven and judged (docs/releases.md)."""

    tick_s: float = Field(1.0, gt=0, le=60)
    lease_s: float = Field(5.0, gt=0, le=600)
    max_error_rate_delta: float = Field(0.02, ge=0, le=1)
    max_latency_ratio: float = Field(1.5, gt=1)
    max_ttft_ratio: float = Field(1.5, gt=1)
    max_tpot_ratio: float = Field(1.5, gt=1)
    max_block_rate_delta: float = Field(0.02, ge=0, le=1)
    max_negative_feedback_delta: float = Field(0.05, ge=0, le=1)
    min_feedback: int = Field(20, ge=1)
    regeneration_window_s: float = Field(600.0, gt=0, le=86400)
    flush_s: float = Field(1.0, gt=0, le=60)
    alert_webhook: str | None = None


class ReleasesConfig(_Model):
    """The registry's behaviour on every replica."""

    poll_interval_s: float = Field(0.5, gt=0, le=10)
    retention: int = Field(3, ge=1, le=100)
    version_aliases: bool = True
    gates: dict[str, GateConfig] = Field(default_factory=dict)
    rollout: RolloutConfig = RolloutConfig()
    record_requests: bool = True  # a row per request of registry aliases (feedback, flywheel)
    requests_retention_s: int = Field(30 * 86400, ge=60)
