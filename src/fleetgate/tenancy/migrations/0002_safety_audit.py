"""Safety: verdicts of the asynchronous guard-model audit.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetgate.store import columns

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_safety_audit",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("request_id", sa.String(100)),
        *columns.request_scope(required=False),
        sa.Column("flagged", sa.Boolean, nullable=False),
        sa.Column("categories", sa.JSON, nullable=False),
        sa.Column("verdicts", sa.JSON, nullable=False),
        sa.Column("failed", sa.Boolean, nullable=False),
    )
    op.create_index("ix_fg_safety_audit_time", "fg_safety_audit", ["created_ms"])
    op.create_index("ix_fg_safety_audit_key_time", "fg_safety_audit", ["key_id", "created_ms"])


def downgrade() -> None:
    op.drop_index("ix_fg_safety_audit_key_time", "fg_safety_audit")
    op.drop_index("ix_fg_safety_audit_time", "fg_safety_audit")
    op.drop_table("fg_safety_audit")
