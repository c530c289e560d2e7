"""The releases feature's tables, created by ``releases/migrations`` (0006, 0008, 0014).

The model registry (0006): models, immutable versions, stage aliases moved by compare-and-set
and their append-only history; evaluation runs with per-item results; users' feedback on
answers; progressive rollouts (one per alias, driven by the replica holding its lease).

Request outcomes (0008):

- ``fg_release_outcomes``: what each replica saw of each version of an alias under rollout, per
  time bucket: requests, failed requests, upstream attempts and failed attempts (a request the
  dispatcher retried counts every failed try), output guardrail blocks, and sparse histograms
  of latency, TTFT and TPOT. One row per (alias, version, replica, bucket); only its replica
  writes it (replacing it with its running totals), so replicas never contend and the rollout
  analysis sums the rows of every replica.
- ``fg_release_requests``: one row per request on an alias that follows the registry: the
  response id the client got, alias, version, key, team, a digest of the conversation and of
  the prompt (regenerations: the same prompt asked again), status and whether an output
  guardrail blocked it. Feedback by ``response_id`` resolves through it; the flywheel export
  joins it with the request audit's payloads.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from fleetgate.store.tables import metadata

__all__ = [
    "eval_items",
    "eval_runs",
    "feedback",
    "registry_history",
    "registry_models",
    "registry_stages",
    "registry_versions",
    "release_outcomes",
    "release_requests",
    "rollouts",
]

registry_models = Table(
    "fg_registry_models",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("description", Text),
    Column("created_ms", BigInteger, nullable=False),
)

registry_versions = Table(
    "fg_registry_versions",
    metadata,
    Column("model", String(200), ForeignKey("fg_registry_models.name"), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("seq", Integer, nullable=False),  # registration order within the model
    Column("artifact_uri", Text, nullable=False),
    Column("tokenizer", String(300)),
    Column("tensor_parallel", Integer),
    Column("max_model_len", Integer),
    Column("quantization", String(64)),
    Column("parent_version", String(64)),
    Column("card", JSON, nullable=False, default=dict),
    Column("deployments", JSON, nullable=False),  # DeploymentConfig objects that serve it
    Column("status", String(16), nullable=False),  # "ready" | "archived" (retention)
    Column("created_ms", BigInteger, nullable=False),
    UniqueConstraint("model", "seq", name="fg_registry_versions_seq"),
)

registry_stages = Table(
    "fg_registry_stages",
    metadata,
    Column("model", String(200), ForeignKey("fg_registry_models.name"), primary_key=True),
    Column("stage", String(64), primary_key=True),
    Column("version", String(64)),  # moved only by compare-and-set on this column
    Column("updated_ms", BigInteger, nullable=False),
)

registry_history = Table(
    "fg_registry_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model", String(200), nullable=False),
    Column("stage", String(64), nullable=False),
    Column("action", String(16), nullable=False),  # "promote" | "rollback"
    Column("from_version", String(64)),
    Column("to_version", String(64)),
    Column("actor", String(40), nullable=False),
    Column("detail", JSON, nullable=False, default=dict),  # other aliases moved, gate, force
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_fg_registry_history_model", "model", "id"),
)

eval_runs = Table(
    "fg_eval_runs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("model", String(200), nullable=False),
    Column("version", String(64), nullable=False),
    Column("suite", String(200), nullable=False),
    Column("suite_digest", String(64), nullable=False),
    Column("metrics", JSON, nullable=False),  # {"golden": 0.99, "ttft_p95_ms": 41.0, ...}
    Column("comparison", JSON),  # paired comparison against the production version
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_fg_eval_runs_version", "model", "version", "created_ms"),
)

eval_items = Table(
    "fg_eval_items",
    metadata,
    Column("run_id", String(40), ForeignKey("fg_eval_runs.id"), primary_key=True),
    Column("item_id", String(200), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("score", Float, nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("output", Text),
    Column("ttft_ms", Float),
    Column("error", Text),
)

feedback = Table(
    "fg_feedback",
    metadata,
    Column("request_id", String(100), primary_key=True),  # the x-request-id of the answer
    Column("key_id", String(40), primary_key=True),  # who gave it (one verdict per key)
    Column("team_id", String(40)),
    Column("score", Float, nullable=False),  # 0..1; thumbs up 1, thumbs down 0
    Column("rating", String(8)),  # "up" | "down" | None (a score was given)
    Column("comment", Text),
    Column("tags", JSON, nullable=False, default=list),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_fg_feedback_time", "created_ms"),
)

rollouts = Table(
    "fg_rollouts",
    metadata,
    Column("alias", String(200), primary_key=True),  # one rollout per alias at a time
    Column("model", String(200), nullable=False),
    Column("baseline", String(64), nullable=False),
    Column("candidate", String(64), nullable=False),
    Column("steps", JSON, nullable=False),  # percents, e.g. [10, 50, 100]
    Column("step", Integer, nullable=False),  # index into steps
    Column("percent", Float, nullable=False),  # traffic to the candidate now
    Column("status", String(16), nullable=False),  # running|paused|rolled_back|completed|aborted
    Column("interval_s", Float, nullable=False),
    Column("min_samples", Integer, nullable=False),
    Column("step_started_ms", BigInteger, nullable=False),
    Column("reason", Text),
    Column("owner", String(64)),  # the replica driving it (lease)
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("revision", Integer, nullable=False),  # compare-and-set of every change
    Column("decisions", JSON, nullable=False, default=list),
    Column("started_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

release_outcomes = Table(
    "fg_release_outcomes",
    metadata,
    Column("alias", String(200), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("replica", String(64), primary_key=True),
    Column("bucket_ms", BigInteger, primary_key=True),
    Column("requests", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("failed_attempts", Integer, nullable=False),
    Column("blocked", Integer, nullable=False),
    Column("latency", JSON, nullable=False),  # {bin: count} (`fleetgate.releases.outcomes`)
    Column("ttft", JSON, nullable=False),
    Column("tpot", JSON, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_fg_release_outcomes_time", "alias", "version", "bucket_ms"),
)

release_requests = Table(
    "fg_release_requests",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("response_id", String(200)),
    Column("created_ms", BigInteger, nullable=False),
    Column("alias", String(200), nullable=False),
    Column("version", String(64)),
    Column("key_id", String(40)),
    Column("team_id", String(40)),
    Column("conversation", String(64), nullable=False),
    Column("prompt_hash", String(64), nullable=False),
    Column("status", Integer, nullable=False),
    Column("blocked", Boolean, nullable=False),
    Index("ix_fg_release_requests_response", "response_id"),
    Index("ix_fg_release_requests_time", "alias", "created_ms"),
    Index("ix_fg_release_requests_prompt", "key_id", "prompt_hash", "created_ms"),
)
