"""The durable tables (SQLAlchemy Core, one definition for every dialect): tenancy and cost,
audits, and the multimodal conversations. Every table is created by the Alembic migrations
in ``fleetgate/store/migrations``, never by ``create_all``.

Shared live state (``fg_shared_*``, ``fg_documents``, ``fg_document_chunks``,
``fg_safety_strikes``) is what every replica must agree on: admin overrides, canary splits, team
documents with their embeddings and safety strike counts (see ``docs/architecture.md``).

Times are integer milliseconds since the epoch and money is integer nano-USD, so SQLite and
PostgreSQL store, compare and sum them identically and a report adds up to the cent (the
conversation tables, older, keep float seconds).
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
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "admin_audit",
    "batch_results",
    "batches",
    "files",
    "eval_items",
    "eval_runs",
    "feedback",
    "registry_history",
    "rollouts",
    "registry_models",
    "registry_stages",
    "registry_versions",
    "document_chunks",
    "documents",
    "safety_strikes",
    "shared_state",
    "shared_versions",
    "api_keys",
    "budget_alerts",
    "conversation_turns",
    "console_sessions",
    "conversations",
    "metadata",
    "request_audit",
    "responses",
    "safety_audit",
    "spend",
    "spend_rollup",
    "spend_tags",
    "teams",
    "tenancy_state",
    "users",
]

metadata = MetaData()

teams = Table(
    "fg_teams",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("rpm", Integer),
    Column("tpm", Integer),
    Column("max_parallel", Integer),
    Column("max_budget_nusd", BigInteger),
    Column("budget_period", String(16)),
    Column("log_payloads", Boolean, nullable=False, default=False),
    Column("tags", JSON, nullable=False, default=dict),
    Column("created_ms", BigInteger, nullable=False),
)

users = Table(
    "fg_users",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("team_id", String(40), ForeignKey("fg_teams.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)

api_keys = Table(
    "fg_api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("key_hint", String(32), nullable=False),
    Column("team_id", String(40), ForeignKey("fg_teams.id"), nullable=False),
    Column("user_id", String(40)),
    Column("role", String(16), nullable=False, default="user"),
    Column("aliases", JSON),
    Column("rpm", Integer),
    Column("tpm", Integer),
    Column("max_parallel", Integer),
    Column("max_budget_nusd", BigInteger),
    Column("budget_period", String(16)),
    Column("tags", JSON, nullable=False, default=dict),
    Column("expires_ms", BigInteger),
    Column("revoked_ms", BigInteger),
    Column("created_ms", BigInteger, nullable=False),
    Column("last_used_ms", BigInteger),  # at most a minute stale per process (tenancy.key_use)
)

spend = Table(
    "fg_spend",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("key_id", String(40), nullable=False),
    Column("team_id", String(40)),
    Column("alias", String(200), nullable=False),
    Column("deployment", String(200)),
    Column("version", String(64)),
    Column("status", Integer, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),  # prompt tokens read from a prompt cache
    # Prompt tokens written to the upstream's prompt cache; NULL in rows from before 0010.
    Column("cache_write_tokens", Integer),
    Column("cost_nusd", BigInteger, nullable=False),
    Column("latency_ms", Integer, nullable=False),
    Column("tags", JSON, nullable=False, default=dict),
    Index("ix_fg_spend_team_time", "team_id", "created_ms"),
    Index("ix_fg_spend_key_time", "key_id", "created_ms"),
    Index("ix_fg_spend_time", "created_ms"),  # the partial hours at a report's edges
)

spend_tags = Table(
    "fg_spend_tags",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("tag", String(300), primary_key=True),
)

# Spend summed per hour and per UTC day (``period_ms``), one row per dimension value: ``dim``
# is team, key, alias, deployment, version or tag, ``group_value`` the key id, alias, ... ('' for
# the team dimension and for a missing deployment, version, tag or team). Written with the spend
# rows in their transaction (`fleetgate.store.rollup`); reports read it (`tenancy/spend_query.py`).
spend_rollup = Table(
    "fg_spend_rollup",
    metadata,
    Column("dim", String(16), primary_key=True),
    Column("period_ms", BigInteger, primary_key=True),
    Column("start_ms", BigInteger, primary_key=True),
    Column("team_id", String(40), primary_key=True),
    Column("group_value", String(300), primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    Column("cache_write_tokens", BigInteger, nullable=False),
    Column("cost_nusd", BigInteger, nullable=False),
    sqlite_with_rowid=False,  # every lookup is by the primary key: keep the rows in it
)

request_audit = Table(
    "fg_request_audit",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("key_id", String(40), nullable=False),
    Column("team_id", String(40)),
    Column("alias", String(200), nullable=False),
    Column("decision", String(32), nullable=False),
    Column("status", Integer, nullable=False),
    Column("error_type", String(64)),
    Column("prompt", JSON),
    Column("response", Text),
    Index("ix_fg_request_audit_team_time", "team_id", "created_ms"),
)

safety_audit = Table(
    "fg_safety_audit",
    metadata,
    Column("id", String(100), primary_key=True),  # the request id: a replay never duplicates
    Column("request_id", String(100)),
    Column("created_ms", BigInteger, nullable=False),
    Column("key_id", String(40)),
    Column("team_id", String(40)),
    Column("alias", String(200)),
    Column("flagged", Boolean, nullable=False),
    Column("categories", JSON, nullable=False),
    Column("verdicts", JSON, nullable=False),
    Column("failed", Boolean, nullable=False),
    Index("ix_fg_safety_audit_time", "created_ms"),
    Index("ix_fg_safety_audit_key_time", "key_id", "created_ms"),
)

admin_audit = Table(
    "fg_admin_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("actor_key_id", String(40), nullable=False),
    Column("actor_team_id", String(40)),
    Column("team_id", String(40)),  # the team the action concerns (None: global)
    Column("action", String(64), nullable=False),
    Column("target", String(200)),
    Column("detail", JSON, nullable=False, default=dict),
)

budget_alerts = Table(
    "fg_budget_alerts",
    metadata,
    Column("scope", String(8), primary_key=True),
    Column("scope_id", String(40), primary_key=True),
    Column("period_start_ms", BigInteger, primary_key=True),
    Column("threshold", Integer, primary_key=True),
    Column("sent_ms", BigInteger, nullable=False),
)

tenancy_state = Table(
    "fg_tenancy_state",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", BigInteger, nullable=False),
)

conversations = Table(
    "mm_conversations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(128), nullable=False, index=True),
    Column("user_id", String(128)),
    Column("created_at", Float, nullable=False),
)

conversation_turns = Table(
    "mm_turns",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("mm_conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("seq", Integer, nullable=False),
    Column("role", String(32), nullable=False),
    Column("content", JSON, nullable=False),
    Column("request_id", String(128)),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("conversation_id", "seq", name="mm_turns_conv_seq"),
)

responses = Table(
    "fg_responses",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(64), nullable=False),  # the key's team, or the key without one
    Column("previous_id", String(64)),
    Column("created_ms", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
    Column("response", JSON, nullable=False),  # the response object, as GET returns it
    Column("messages", JSON, nullable=False),  # the turn's chat messages: input, then output
    Column("input", JSON, nullable=False),  # the input items, as input_items lists them
    Index("ix_fg_responses_expires", "expires_ms"),
)

# Console sign-in sessions, shared by every replica: the SHA-256 of the cookie's session id (the
# id itself is never stored) and the credential sealed with a key derived from that id.
console_sessions = Table(
    "fg_console_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("via", String(8), nullable=False),  # "key" | "oidc"
    Column("role", String(16), nullable=False),
    Column("team_id", String(40)),
    Column("principal", JSON, nullable=False),  # the rest of the Principal
    Column("name", String(200), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("sealed_token", LargeBinary, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
    Column("flash", LargeBinary),  # a one-time message for the next page, sealed (0013)
    Index("ix_fg_console_sessions_expires", "expires_ms"),
    Index("ix_fg_console_sessions_created", "created_ms"),
)

# -- state every replica must agree on ------------------------------------------------------------

shared_state = Table(
    "fg_shared_state",
    metadata,
    Column("kind", String(32), primary_key=True),  # "safety_overrides", "canary_splits", ...
    Column("name", String(200), primary_key=True),
    Column("body", JSON, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

shared_versions = Table(
    "fg_shared_versions",
    metadata,
    Column("kind", String(32), primary_key=True),
    Column("version", BigInteger, nullable=False),  # bumped in the same transaction as a change
)

documents = Table(
    "fg_documents",
    metadata,
    Column("team", String(128), primary_key=True),
    Column("doc_id", String(200), primary_key=True),
    Column("bytes", Integer, nullable=False),
    Column("chunks", Integer, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

document_chunks = Table(
    "fg_document_chunks",
    metadata,
    Column("team", String(128), primary_key=True),
    Column("doc_id", String(200), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("text", Text, nullable=False),
    Column("embedding", LargeBinary, nullable=False),  # float32, little-endian, L2-normalised
)

safety_strikes = Table(
    "fg_safety_strikes",
    metadata,
    Column("key_id", String(40), primary_key=True),
    Column("count", Integer, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

# -- releases: the model registry and evaluation runs ---------------------------------------------

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

# The batch lane (batches/): uploaded files with their bytes (every replica reads the same ones,
# no shared volume needed), batches with the lease of the replica driving each, and one row
# per finished line, written before the line counts as done (a restart resumes from them).
files = Table(
    "fg_files",
    metadata,
    Column("id", String(40), primary_key=True),  # file-<hex>
    Column("owner", String(64), nullable=False),  # the team (or key, without a team)
    Column("purpose", String(32), nullable=False),  # batch | batch_output
    Column("filename", String(255), nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("content", LargeBinary, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_fg_files_owner", "owner", "created_ms"),
)

batches = Table(
    "fg_batches",
    metadata,
    Column("id", String(40), primary_key=True),  # batch_<hex>
    Column("owner", String(64), nullable=False),
    Column("key_id", String(40), nullable=False),  # whose key the lines run with
    Column("endpoint", String(64), nullable=False),
    Column("input_file_id", String(40), nullable=False),
    Column("completion_window", String(8), nullable=False),
    Column("status", String(16), nullable=False),
    Column("total", Integer, nullable=False),
    Column("output_file_id", String(40)),
    Column("error_file_id", String(40)),
    Column("errors", JSON),  # batch-level errors (OpenAI's ``errors.data``)
    Column("meta", JSON),  # the caller's ``metadata``
    Column("created_ms", BigInteger, nullable=False),
    Column("in_progress_ms", BigInteger),
    Column("finalizing_ms", BigInteger),
    Column("completed_ms", BigInteger),
    Column("failed_ms", BigInteger),
    Column("expired_ms", BigInteger),
    Column("cancelling_ms", BigInteger),
    Column("cancelled_ms", BigInteger),
    Column("expires_ms", BigInteger, nullable=False),
    Column("lease_owner", String(64)),  # the replica driving it
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("principal", JSON),  # what its creator was allowed (batches/grant.py), per line
    Column("line_attempts", JSON),  # {line: times sent} of lines sent but not yet recorded
    Index("ix_fg_batches_owner", "owner", "created_ms"),
    Index("ix_fg_batches_status", "status"),
)

batch_results = Table(
    "fg_batch_results",
    metadata,
    Column("batch_id", String(40), ForeignKey("fg_batches.id"), primary_key=True),
    Column("line", Integer, primary_key=True),  # 1-based line of the input file
    Column("custom_id", String(512)),  # None for a line that could not be read
    Column("ok", Boolean, nullable=False),  # output file (True) or error file (False)
    Column("record", Text, nullable=False),  # the output or error file's JSON line
    Column("created_ms", BigInteger, nullable=False),
    UniqueConstraint("batch_id", "custom_id", name="fg_batch_results_custom_id"),
)
