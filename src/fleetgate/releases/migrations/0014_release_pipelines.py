"""Releases: one durable pipeline run per registered version (``fg_release_pipelines``): its
steps, the engines it launched, the gate's verdict, and the lease of the replica driving it.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_release_pipelines",
        sa.Column("model", sa.String(64), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("steps", sa.JSON, nullable=False),
        sa.Column("engines", sa.JSON, nullable=False),
        sa.Column("gate", sa.JSON),
        sa.Column("reason", sa.String(2000)),
        sa.Column("owner", sa.String(64)),
        sa.Column("lease_until_ms", sa.BigInteger, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_release_pipelines_status", "fg_release_pipelines", ["status"])


def downgrade() -> None:
    op.drop_table("fg_release_pipelines")
