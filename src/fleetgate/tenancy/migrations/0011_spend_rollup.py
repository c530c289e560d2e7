"""The spend rollup (``fg_spend_rollup``, backfilled from the spend rows there are), an index on
``fg_spend.created_ms`` for the partial hours at a report's edges, and the console's sessions
shared by every replica (``fg_console_sessions``).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetgate.store import columns

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_spend_rollup",
        sa.Column("dim", sa.String(16), primary_key=True),
        sa.Column("period_ms", sa.BigInteger, primary_key=True),
        sa.Column("start_ms", sa.BigInteger, primary_key=True),
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("group_value", sa.String(300), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        *columns.token_counts(sa.BigInteger),
        sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_nusd", sa.BigInteger, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_fg_spend_time", "fg_spend", ["created_ms"])
    # The backfill is the statement the writers run, over the whole table (the rollup's one
    # definition lives in fleetgate.tenancy.rollup; its table's shape does not depend on it).
    from fleetgate.tenancy.rollup import rollup_statement

    op.execute(sa.text(rollup_statement(op.get_bind().dialect.name, "fg_spend")))
    op.create_table(
        "fg_console_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("via", sa.String(8), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("team_id", sa.String(40)),
        sa.Column("principal", sa.JSON, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("sealed_token", sa.LargeBinary, nullable=False),
        columns.created_ms(),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_console_sessions_expires", "fg_console_sessions", ["expires_ms"])
    op.create_index("ix_fg_console_sessions_created", "fg_console_sessions", ["created_ms"])


def downgrade() -> None:
    op.drop_index("ix_fg_console_sessions_created", table_name="fg_console_sessions")
    op.drop_index("ix_fg_console_sessions_expires", table_name="fg_console_sessions")
    op.drop_table("fg_console_sessions")
    op.drop_index("ix_fg_spend_time", table_name="fg_spend")
    op.drop_table("fg_spend_rollup")
