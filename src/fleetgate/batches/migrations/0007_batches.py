"""The batch lane: uploaded files, batches (with the lease of the replica driving each) and one
result row per finished line.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetgate.store import columns

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_files",
        columns.string_id(),
        columns.owner(),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        columns.created_ms(),
    )
    op.create_index("ix_fg_files_owner", "fg_files", ["owner", "created_ms"])
    op.create_table(
        "fg_batches",
        columns.string_id(),
        columns.owner(),
        columns.key_id(required=True),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("input_file_id", sa.String(40), nullable=False),
        sa.Column("completion_window", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("output_file_id", sa.String(40)),
        sa.Column("error_file_id", sa.String(40)),
        sa.Column("errors", sa.JSON),
        sa.Column("meta", sa.JSON),
        columns.created_ms(),
        *columns.moments_ms(
            "in_progress_ms",
            "finalizing_ms",
            "completed_ms",
            "failed_ms",
            "expired_ms",
            "cancelling_ms",
            "cancelled_ms",
        ),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("lease_until_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_batches_owner", "fg_batches", ["owner", "created_ms"])
    op.create_index("ix_fg_batches_status", "fg_batches", ["status"])
    op.create_table(
        "fg_batch_results",
        sa.Column("batch_id", sa.String(40), sa.ForeignKey("fg_batches.id"), primary_key=True),
        sa.Column("line", sa.Integer, primary_key=True),
        sa.Column("custom_id", sa.String(512)),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        columns.created_ms(),
        sa.UniqueConstraint("batch_id", "custom_id", name="fg_batch_results_custom_id"),
    )


def downgrade() -> None:
    op.drop_table("fg_batch_results")
    op.drop_index("ix_fg_batches_status", "fg_batches")
    op.drop_index("ix_fg_batches_owner", "fg_batches")
    op.drop_table("fg_batches")
    op.drop_index("ix_fg_files_owner", "fg_files")
    op.drop_table("fg_files")
