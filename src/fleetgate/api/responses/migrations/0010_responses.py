"""Stored responses of the Responses API (``previous_response_id`` state), per tenant.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetgate.store import columns

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_responses",
        columns.string_id(64),
        columns.owner(),
        sa.Column("previous_id", sa.String(64)),
        columns.created_ms(),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("messages", sa.JSON, nullable=False),
        sa.Column("input", sa.JSON, nullable=False),
    )
    op.create_index("ix_fg_responses_expires", "fg_responses", ["expires_ms"])


def downgrade() -> None:
    op.drop_index("ix_fg_responses_expires", table_name="fg_responses")
    op.drop_table("fg_responses")
