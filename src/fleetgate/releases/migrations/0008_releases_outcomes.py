"""Releases: per-version request outcomes for the rollout analysis (failed requests and
attempts, guardrail blocks, latency/TTFT/TPOT histograms), and one row per request on a
registry-following alias (response id, version, conversation and prompt digests) for feedback
by response id, regenerations and the flywheel export.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_release_outcomes",
        sa.Column("alias", sa.String(200), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("replica", sa.String(64), primary_key=True),
        sa.Column("bucket_ms", sa.BigInteger, primary_key=True),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("errors", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("failed_attempts", sa.Integer, nullable=False),
        sa.Column("blocked", sa.Integer, nullable=False),
        sa.Column("latency", sa.JSON, nullable=False),
        sa.Column("ttft", sa.JSON, nullable=False),
        sa.Column("tpot", sa.JSON, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_fg_release_outcomes_time", "fg_release_outcomes", ["alias", "version", "bucket_ms"]
    )
    op.create_table(
        "fg_release_requests",
        sa.Column("request_id", sa.String(100), primary_key=True),
        sa.Column("response_id", sa.String(200)),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64)),
        sa.Column("key_id", sa.String(40)),
        sa.Column("team_id", sa.String(40)),
        sa.Column("conversation", sa.String(64), nullable=False),
        sa.Column("prompt_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("blocked", sa.Boolean, nullable=False),
    )
    op.create_index("ix_fg_release_requests_response", "fg_release_requests", ["response_id"])
    op.create_index("ix_fg_release_requests_time", "fg_release_requests", ["alias", "created_ms"])
    op.create_index(
        "ix_fg_release_requests_prompt",
        "fg_release_requests",
        ["key_id", "prompt_hash", "created_ms"],
    )


def downgrade() -> None:
    op.drop_table("fg_release_requests")
    op.drop_table("fg_release_outcomes")
