"""Insights: closed rollups shared by every replica: the marks that say which are current
(``fg_insight_marks``), each user's last two active days (``fg_insight_user_lasts``,
backfilled), a finished day's business figures (``fg_insight_day_users``,
``fg_insight_day_cohorts``) and a finished hour's quality figures
(``fg_insight_quality_hours``); the indexes their computation reads (a user's earlier days, a
thread's requests in time order, by a new column ``thread``: the conversation, else the
session). See ``fleetgate/insights/tables.py`` and ``fleetgate/insights/marks.py``. Existing
rows get a mark per day and hour they fall on (a unit without a mark is empty to the
readers), so the background closes them.

Revision ID: insights_0016
Revises: 0015
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.util import await_only

revision = "insights_0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_QUALITY = ("requests", "streamed", "abandoned", "regenerated", "feedback_up", "feedback_down",
            "accepted", "edited", "rejected", "grounding_samples", "grounded",
            "reviews_scored")  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "fg_insight_marks",
        sa.Column("kind", sa.String(1), primary_key=True),
        sa.Column("unit", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("writes", sa.BigInteger, nullable=False),
        sa.Column("closed", sa.BigInteger),
        sa.Column("param", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_insight_user_lasts",
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("end_user", sa.String(200), primary_key=True),
        sa.Column("plan", sa.String(32), primary_key=True),
        sa.Column("last_day", sa.Integer, nullable=False),
        sa.Column("prev_day", sa.Integer, nullable=False),
        sa.Column("first_day", sa.Integer, nullable=False),
    )
    op.create_table(
        "fg_insight_day_users",
        sa.Column("day", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("plan", sa.String(32), primary_key=True),
        sa.Column("prev_day", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("users", sa.Integer, nullable=False),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_nusd", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "fg_insight_day_cohorts",
        sa.Column("day", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("first_day", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("users", sa.Integer, nullable=False),
    )
    op.create_table(
        "fg_insight_quality_hours",
        sa.Column("hour", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("team_id", sa.String(40), primary_key=True),
        sa.Column("alias", sa.String(200), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        *(sa.Column(name, sa.BigInteger, nullable=False) for name in _QUALITY),
        sa.Column("review_score_sum", sa.Float, nullable=False),
    )
    # Over existing rows these take longer than the store's client-side command timeout
    # (seconds, for the request path): run without it (12.7 s for the thread index alone over
    # 1M requests on PostgreSQL on a loaded 2-core box).
    _long(
        "CREATE INDEX ix_fg_insight_user_days_user ON fg_insight_user_days "
        "(team_id, end_user, plan, day)"
    )
    op.add_column("fg_insight_requests", sa.Column("thread", sa.String(200)))
    _long(
        "UPDATE fg_insight_requests SET thread = COALESCE(conversation_id, session_id) "
        "WHERE conversation_id IS NOT NULL OR session_id IS NOT NULL"
    )
    _long(
        "CREATE INDEX ix_fg_insight_requests_thread ON fg_insight_requests "
        "(team_id, thread, created_ms, request_id)"
    )
    for plan, same in (("plan", " AND x.plan = l.plan"), ("''", "")):
        _long(
            "INSERT INTO fg_insight_user_lasts (team_id, end_user, plan, last_day, prev_day, "
            "first_day) SELECT team_id, end_user, plan, last_day, COALESCE((SELECT MAX(x.day) "
            "FROM fg_insight_user_days x WHERE x.team_id = l.team_id AND x.end_user = "
            f"l.end_user{same} AND x.day < l.last_day), -1), first_day FROM (SELECT team_id, "
            f"end_user, {plan} AS plan, MAX(day) AS last_day, MIN(day) AS first_day FROM "
            "fg_insight_user_days GROUP BY team_id, end_user"
            f"{', plan' if plan == 'plan' else ''}) l"
        )
    _long("CREATE INDEX ix_fg_insight_user_lasts_last ON fg_insight_user_lasts (last_day)")
    _long(
        "INSERT INTO fg_insight_marks (kind, unit, writes, closed, param) "
        "SELECT 'b', day, 1, NULL, 0 FROM (SELECT DISTINCT day FROM fg_insight_user_days) s"
    )
    _long(
        "INSERT INTO fg_insight_marks (kind, unit, writes, closed, param) "
        "SELECT 'q', h, 1, NULL, 0 FROM ("
        "SELECT DISTINCT CAST(created_ms / 3600000 AS INTEGER) AS h FROM fg_insight_requests "
        "UNION SELECT DISTINCT CAST(created_ms / 3600000 AS INTEGER) FROM fg_insight_grounding"
        ") s"
    )


def _long(sql: str) -> None:
    """Run ``sql`` in the migration's transaction; on PostgreSQL without the client-side
    command timeout (through the asyncpg connection under SQLAlchemy's adapter)."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        op.execute(sql)
        return
    adapted: Any = bind.connection.dbapi_connection
    await_only(adapted._connection.execute(sql, timeout=3600))


def downgrade() -> None:
    op.drop_index("ix_fg_insight_requests_thread", "fg_insight_requests")
    op.drop_column("fg_insight_requests", "thread")
    op.drop_index("ix_fg_insight_user_days_user", "fg_insight_user_days")
    op.drop_table("fg_insight_quality_hours")
    op.drop_table("fg_insight_day_cohorts")
    op.drop_table("fg_insight_day_users")
    op.drop_table("fg_insight_user_lasts")
    op.drop_table("fg_insight_marks")
