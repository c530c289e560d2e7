"""The insights tables (created by migration 0015, never by ``create_all``).

``fg_insight_requests``: one row per request that reached an upstream (the spend row's
``request_id``): who asked (the end user, hashed unless the team logs payloads), in which
session and conversation, on which plan; tokens and cost as billed. ``fg_insight_user_days``
and ``fg_insight_users`` are rollups written in the same transaction (`insights.writer`), so
business metrics read one row per user and day, never the raw requests.

Days are whole UTC days since the epoch (``created_ms // 86_400_000``).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["events", "grounding", "metadata", "requests", "reviews", "user_days", "users"]

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

# Explicit feedback and adoption events, one of each category per request (the last one wins).
events = Table(
    "fg_insight_events",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("category", String(16), primary_key=True),  # feedback | adoption
    Column("value", String(16), nullable=False),  # up, down | accepted, edited, rejected
    Column("created_ms", BigInteger, nullable=False),
    Column("team_id", String(40), nullable=False),
    Column("alias", String(200), nullable=False),
    Column("version", String(64)),
)

# Groundedness of sampled RAG answers against the documents retrieved for them.
grounding = Table(
    "fg_insight_grounding",
    metadata,
    Column("sample_id", String(100), primary_key=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("team_id", String(40), nullable=False),
    Column("alias", String(200), nullable=False),
    Column("version", String(64)),
    Column("score", Float, nullable=False),
    Column("grounded", Integer, nullable=False),  # 1: score >= the threshold then
    Index("ix_fg_insight_grounding_time", "created_ms"),
)

# Requests sampled for human review, and their rubric scores.
reviews = Table(
    "fg_insight_reviews",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("team_id", String(40), nullable=False),
    Column("alias", String(200), nullable=False),
    Column("version", String(64)),
    Column("prompt", JSON),  # None where the team does not log payloads
    Column("response", Text),
    Column("scores", JSON),  # criterion -> 1..5; None: not scored yet
    Column("score", Float),  # the mean of ``scores``
    Column("reviewer", String(40)),
    Column("scored_ms", BigInteger),
    Index("ix_fg_insight_reviews_time", "created_ms"),
)
