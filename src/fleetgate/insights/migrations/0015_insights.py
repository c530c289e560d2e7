"""Insights: requests with their end user, session, conversation and plan
(``fg_insight_requests``), and the per-user rollups business metrics read
(``fg_insight_user_days``, ``fg_insight_users``), feedback and adoption events, groundedness
scores and the human review queue; see ``fleetgate/insights/tables.py``.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fg_insight_requests",
        sa.Column("request_id", sa.String(100), primary_key=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("day", sa.Integer, nullable=False),
        sa.Column("team_id", sa.String(40), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("end_user", sa.String(200)),
        sa.Column("session_id", sa.String(200)),
        sa.Column("conversation_id", sa.String(200)),
        sa.Column("plan", sa.String(32), nullable=False),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64)),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("stream", sa.Integer, nullable=False),
        sa.Column("finish_reason", sa.String(32)),
        sa.Column("response_id", sa.String(200)),
        sa.Column("prompt_hash", sa.String(32)),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("cost_nusd", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_fg_insight_requests_time", "fg_insight_requests", ["created_ms"])
    op.create_index("ix_fg_insight_requests_response", "fg_insight_requests", ["response_id"])
    op.create_index(
        "ix_fg_insight_requests_session",
        "fg_insight_requests",
        ["team_id", "session_id", "created_ms"],
    )
    op.create_table(
        "fg_insight_user_days",
        sa.Column("day", sa.Integer, primary_key=True),
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("end_user", sa.String(200), primary_key=True),
        sa.Column("plan", sa.String(32), primary_key=True),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_nusd", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_insight_users",
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("end_user", sa.String(200), primary_key=True),
        sa.Column("first_day", sa.Integer, nullable=False),
        sa.Column("first_plan", sa.String(32), nullable=False),
        sa.Column("paid_day", sa.Integer),
    )
    op.create_index("ix_fg_insight_users_first", "fg_insight_users", ["first_day"])
    op.create_table(
        "fg_insight_events",
        sa.Column("request_id", sa.String(100), primary_key=True),
        sa.Column("category", sa.String(16), primary_key=True),
        sa.Column("value", sa.String(16), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("team_id", sa.String(40), nullable=False),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64)),
    )
    op.create_table(
        "fg_insight_grounding",
        sa.Column("sample_id", sa.String(100), primary_key=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("team_id", sa.String(40), nullable=False),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64)),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("grounded", sa.Integer, nullable=False),
    )
    op.create_index("ix_fg_insight_grounding_time", "fg_insight_grounding", ["created_ms"])
    op.create_table(
        "fg_insight_reviews",
        sa.Column("request_id", sa.String(100), primary_key=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("team_id", sa.String(40), nullable=False),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64)),
        sa.Column("prompt", sa.JSON),
        sa.Column("response", sa.Text),
        sa.Column("scores", sa.JSON),
        sa.Column("score", sa.Float),
        sa.Column("reviewer", sa.String(40)),
        sa.Column("scored_ms", sa.BigInteger),
    )
    op.create_index("ix_fg_insight_reviews_time", "fg_insight_reviews", ["created_ms"])


def downgrade() -> None:
    op.drop_table("fg_insight_reviews")
    op.drop_table("fg_insight_grounding")
    op.drop_table("fg_insight_events")
    op.drop_table("fg_insight_users")
    op.drop_table("fg_insight_user_days")
    op.drop_table("fg_insight_requests")
