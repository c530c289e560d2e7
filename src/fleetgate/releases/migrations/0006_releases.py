"""Releases: the model registry (models, immutable versions, stage aliases moved by
compare-and-set, their append-only history), evaluation runs with per-item results,
users' feedback on answers, and progressive rollouts.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_registry_models",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("description", sa.Text),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_registry_versions",
        sa.Column(
            "model", sa.String(200), sa.ForeignKey("fg_registry_models.name"), primary_key=True
        ),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("artifact_uri", sa.Text, nullable=False),
        sa.Column("tokenizer", sa.String(300)),
        sa.Column("tensor_parallel", sa.Integer),
        sa.Column("max_model_len", sa.Integer),
        sa.Column("quantization", sa.String(64)),
        sa.Column("parent_version", sa.String(64)),
        sa.Column("card", sa.JSON, nullable=False),
        sa.Column("deployments", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("model", "seq", name="fg_registry_versions_seq"),
    )
    op.create_table(
        "fg_registry_stages",
        sa.Column(
            "model", sa.String(200), sa.ForeignKey("fg_registry_models.name"), primary_key=True
        ),
        sa.Column("stage", sa.String(64), primary_key=True),
        sa.Column("version", sa.String(64)),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_registry_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("stage", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("from_version", sa.String(64)),
        sa.Column("to_version", sa.String(64)),
        sa.Column("actor", sa.String(40), nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_registry_history_model", "fg_registry_history", ["model", "id"])
    op.create_table(
        "fg_eval_runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("suite", sa.String(200), nullable=False),
        sa.Column("suite_digest", sa.String(64), nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("comparison", sa.JSON),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_eval_runs_version", "fg_eval_runs", ["model", "version", "created_ms"])
    op.create_table(
        "fg_eval_items",
        sa.Column("run_id", sa.String(40), sa.ForeignKey("fg_eval_runs.id"), primary_key=True),
        sa.Column("item_id", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("output", sa.Text),
        sa.Column("ttft_ms", sa.Float),
        sa.Column("error", sa.Text),
    )
    op.create_table(
        "fg_feedback",
        sa.Column("request_id", sa.String(100), primary_key=True),
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("team_id", sa.String(40)),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("rating", sa.String(8)),
        sa.Column("comment", sa.Text),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_feedback_time", "fg_feedback", ["created_ms"])
    op.create_table(
        "fg_rollouts",
        sa.Column("alias", sa.String(200), primary_key=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("baseline", sa.String(64), nullable=False),
        sa.Column("candidate", sa.String(64), nullable=False),
        sa.Column("steps", sa.JSON, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("percent", sa.Float, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("interval_s", sa.Float, nullable=False),
        sa.Column("min_samples", sa.Integer, nullable=False),
        sa.Column("step_started_ms", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("owner", sa.String(64)),
        sa.Column("lease_until_ms", sa.BigInteger, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("decisions", sa.JSON, nullable=False),
        sa.Column("started_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
    )
    # The registry's change counter, bumped in the same transaction as every registry change;
    # each replica polls it (fg_shared_versions is from 0005).
    versions = sa.table("fg_shared_versions", sa.column("kind"), sa.column("version"))
    op.bulk_insert(versions, [{"kind": "registry", "version": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM fg_shared_versions WHERE kind = 'registry'")
    op.drop_table("fg_rollouts")
    op.drop_index("ix_fg_feedback_time", "fg_feedback")
    op.drop_table("fg_feedback")
    op.drop_index("ix_fg_eval_runs_version", "fg_eval_runs")
    op.drop_index("ix_fg_registry_history_model", "fg_registry_history")
    for table in (
        "fg_eval_items",
        "fg_eval_runs",
        "fg_registry_history",
        "fg_registry_stages",
        "fg_registry_versions",
        "fg_registry_models",
    ):
        op.drop_table(table)
