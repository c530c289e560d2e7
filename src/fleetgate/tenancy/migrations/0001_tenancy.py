"""Tenancy and cost: teams, users, keys, spend, audit, budget alerts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetgate.store import columns

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_teams",
        columns.string_id(),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        *columns.limits(),
        sa.Column("log_payloads", sa.Boolean, nullable=False),
        sa.Column("tags", sa.JSON, nullable=False),
        columns.created_ms(),
    )
    op.create_table(
        "fg_users",
        columns.string_id(),
        columns.team_id(required=True, references_teams=True),
        sa.Column("name", sa.String(200), nullable=False),
        columns.created_ms(),
    )
    op.create_table(
        "fg_api_keys",
        columns.string_id(),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("key_hint", sa.String(32), nullable=False),
        columns.team_id(required=True, references_teams=True),
        sa.Column("user_id", sa.String(40)),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("aliases", sa.JSON),
        *columns.limits(),
        sa.Column("tags", sa.JSON, nullable=False),
        *columns.moments_ms("expires_ms", "revoked_ms"),
        columns.created_ms(),
    )
    op.create_table(
        "fg_spend",
        columns.request_id(),
        *columns.request_scope(required=True),
        sa.Column("deployment", sa.String(200)),
        sa.Column("version", sa.String(64)),
        sa.Column("status", sa.Integer, nullable=False),
        *columns.token_counts(),
        sa.Column("cost_nusd", sa.BigInteger, nullable=False),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("tags", sa.JSON, nullable=False),
    )
    op.create_index("ix_fg_spend_team_time", "fg_spend", ["team_id", "created_ms"])
    op.create_index("ix_fg_spend_key_time", "fg_spend", ["key_id", "created_ms"])
    op.create_table(
        "fg_spend_tags",
        sa.Column("request_id", sa.String(100), primary_key=True),
        sa.Column("tag", sa.String(300), primary_key=True),
    )
    op.create_table(
        "fg_request_audit",
        columns.request_id(),
        *columns.request_scope(required=True),
        sa.Column("decision", sa.String(32), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_type", sa.String(64)),
        sa.Column("prompt", sa.JSON),
        sa.Column("response", sa.Text),
    )
    op.create_index("ix_fg_request_audit_team_time", "fg_request_audit", ["team_id", "created_ms"])
    op.create_table(
        "fg_admin_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        columns.created_ms(),
        sa.Column("actor_key_id", sa.String(40), nullable=False),
        sa.Column("actor_team_id", sa.String(40)),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(200)),
        sa.Column("detail", sa.JSON, nullable=False),
    )
    op.create_table(
        "fg_budget_alerts",
        sa.Column("scope", sa.String(8), primary_key=True),
        sa.Column("scope_id", sa.String(40), primary_key=True),
        sa.Column("period_start_ms", sa.BigInteger, primary_key=True),
        sa.Column("threshold", sa.Integer, primary_key=True),
        sa.Column("sent_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_tenancy_state",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO fg_tenancy_state (id, version) VALUES (1, 1)")


def downgrade() -> None:
    for name in (
        "fg_tenancy_state",
        "fg_budget_alerts",
        "fg_admin_audit",
        "fg_request_audit",
        "fg_spend_tags",
        "fg_spend",
        "fg_api_keys",
        "fg_users",
        "fg_teams",
    ):
        op.drop_table(name)
