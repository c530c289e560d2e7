"""Keys' last use (``fg_api_keys.last_used_ms``: written by `fleetgate.tenancy.key_use`, at
most once a minute per key per process) and the console's one-time flash
(``fg_console_sessions.flash``: what a redirect after a form shows once, e.g. a created key,
sealed like the session's credential).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fg_api_keys") as table:
        table.add_column(sa.Column("last_used_ms", sa.BigInteger))
    with op.batch_alter_table("fg_console_sessions") as table:
        table.add_column(sa.Column("flash", sa.LargeBinary))


def downgrade() -> None:
    with op.batch_alter_table("fg_console_sessions") as table:
        table.drop_column("flash")
    with op.batch_alter_table("fg_api_keys") as table:
        table.drop_column("last_used_ms")
