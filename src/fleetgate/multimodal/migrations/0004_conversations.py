"""Multimodal conversations: ``mm_conversations`` and ``mm_turns``, now migrated like every table.

Before this revision the conversation store created its tables itself (``create_all``) on the
same database, so an existing deployment may have them already: they are kept as they are
(same names, columns, index and constraints), and only missing ones are created.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = sa.inspect(op.get_bind())
    if not existing.has_table("mm_conversations"):
        op.create_table(
            "mm_conversations",
            sa.Column("id", sa.String(64), primary_key=True),
            sa.Column("tenant", sa.String(128), nullable=False),
            sa.Column("user_id", sa.String(128)),
            sa.Column("created_at", sa.Float, nullable=False),
        )
        op.create_index("ix_mm_conversations_tenant", "mm_conversations", ["tenant"])
    if not existing.has_table("mm_turns"):
        op.create_table(
            "mm_turns",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column(
                "conversation_id",
                sa.String(64),
                sa.ForeignKey("mm_conversations.id", ondelete="CASCADE"),
                nullable=False,
            ),
            sa.Column("seq", sa.Integer, nullable=False),
            sa.Column("role", sa.String(32), nullable=False),
            sa.Column("content", sa.JSON, nullable=False),
            sa.Column("request_id", sa.String(128)),
            sa.Column("created_at", sa.Float, nullable=False),
            sa.UniqueConstraint("conversation_id", "seq", name="mm_turns_conv_seq"),
        )


def downgrade() -> None:
    op.drop_table("mm_turns")
    op.drop_index("ix_mm_conversations_tenant", "mm_conversations")
    op.drop_table("mm_conversations")
