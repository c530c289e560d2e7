"""Admin audit: the team an action concerns, so a team admin sees what was done to its team
(by the master key too), not only what its own keys did.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fg_admin_audit") as batch:
        batch.add_column(sa.Column("team_id", sa.String(40)))
    op.execute("UPDATE fg_admin_audit SET team_id = actor_team_id")
    op.create_index("ix_fg_admin_audit_team", "fg_admin_audit", ["team_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_fg_admin_audit_team", "fg_admin_audit")
    with op.batch_alter_table("fg_admin_audit") as batch:
        batch.drop_column("team_id")
