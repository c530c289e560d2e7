"""The insights tables (created by migration 0015, never by ``create_all``).

``fg_insight_requests``: one row per request that reached an upstream (the spend row's
``request_id``): who asked (the end user, hashed unless the team logs payloads), in which
session and conversation, on which plan; tokens and cost as billed. ``fg_insight_user_days``
and ``fg_insight_users`` are rollups written in the same transaction (`insights.writer`), so
business metrics read one row per user and day, never the raw requests.

Days are whole UTC days since the epoch (``created_ms // 86_400_000``).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table

__all__ = ["metadata", "requests", "user_days", "users"]

metadata = MetaData()

requests = Table(
    "fg_insight_requests",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("day", Integer, nullable=False),
    Column("team_id", String(40), nullable=False),  # '' for the master key
    Column("key_id", String(40), nullable=False),
    Column("end_user", String(200)),  # None: the request named no user
    Column("session_id", String(200)),
    Column("conversation_id", String(200)),
    Column("plan", String(32), nullable=False),
    Column("alias", String(200), nullable=False),
    Column("version", String(64)),
    Column("status", Integer, nullable=False),
    Column("stream", Integer, nullable=False),  # 1: streamed
    Column("finish_reason", String(32)),
    Column("response_id", String(200)),
    Column("prompt_hash", String(32)),  # the last user message's, to spot regenerations
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("cost_nusd", BigInteger, nullable=False),
    Index("ix_fg_insight_requests_time", "created_ms"),
    Index("ix_fg_insight_requests_response", "response_id"),
    Index("ix_fg_insight_requests_session", "team_id", "session_id", "created_ms"),
)

# One row per day, end user and plan (a plan change within a day: two rows).
user_days = Table(
    "fg_insight_user_days",
    metadata,
    Column("day", Integer, primary_key=True),
    Column("team_id", String(40), primary_key=True),
    Column("end_user", String(200), primary_key=True),
    Column("plan", String(32), primary_key=True),
    Column("requests", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost_nusd", BigInteger, nullable=False),
)

# One row per end user: the first day seen (its cohort), the plan then, the first paid day.
users = Table(
    "fg_insight_users",
    metadata,
    Column("team_id", String(40), primary_key=True),
    Column("end_user", String(200), primary_key=True),
    Column("first_day", Integer, nullable=False),
    Column("first_plan", String(32), nullable=False),
    Column("paid_day", Integer),  # None: never on a paid plan
    Index("ix_fg_insight_users_first", "first_day"),
)
