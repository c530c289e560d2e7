"""The batch lane: what the creating caller was allowed (``principal``: its aliases, user and
expiry, applied to every line) and how often each unfinished line was sent
(``line_attempts``: a line whose replica died or stalled each time is not sent forever).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fg_batches") as table:
        table.add_column(sa.Column("principal", sa.JSON))
        table.add_column(sa.Column("line_attempts", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("fg_batches") as table:
        table.drop_column("line_attempts")
        table.drop_column("principal")
