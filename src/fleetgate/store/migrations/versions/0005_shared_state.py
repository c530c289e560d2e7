"""State every replica must agree on: shared admin state (safety overrides, canary splits), team
documents with their embeddings, and safety strike counts.

Before this revision these lived in each process (documents, strikes, splits without Redis) or
in a file of the data directory (safety overrides), so replicas disagreed.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetgate.store import columns

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_shared_state",
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("body", sa.JSON, nullable=False),
        columns.updated_ms(),
    )
    op.create_table(
        "fg_shared_versions",
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_documents",
        *columns.team_document_key(),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("chunks", sa.Integer, nullable=False),
        columns.updated_ms(),
    )
    op.create_table(
        "fg_document_chunks",
        *columns.team_document_key(),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("embedding", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "fg_safety_strikes",
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("count", sa.Integer, nullable=False),
        columns.updated_ms(),
    )


def downgrade() -> None:
    for table in (
        "fg_safety_strikes",
        "fg_document_chunks",
        "fg_documents",
        "fg_shared_versions",
        "fg_shared_state",
    ):
        op.drop_table(table)
