"""Prompt-cache writes in spend: ``fg_spend.cache_write_tokens`` (NULL in older rows).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fg_spend") as batch:
        batch.add_column(sa.Column("cache_write_tokens", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fg_spend") as batch:
        batch.drop_column("cache_write_tokens")
