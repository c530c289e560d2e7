"""The insights tables (created by migration 0015, never by ``create_all``).

``fg_insight_requests``: one row per request that reached an upstream (the spend row's
``request_id``): who asked (the end user, hashed unless the team logs payloads), in which
session and conversation, on which plan; tokens and cost as billed. ``fg_insight_user_days``
and ``fg_insight_users`` are rollups written in the same transaction (`insights.writer`).

Closed rollups (`insights.marks`): a finished UTC day's business figures
(``fg_insight_day_users``, ``fg_insight_day_cohorts``; `insights.day_rollup`) and a finished
UTC hour's quality figures (``fg_insight_quality_hours``; `insights.hour_rollup`), each
stored once by whichever replica closes it first and trusted only while ``fg_insight_marks``
says no write has landed on what it was computed from since.

Days are whole UTC days since the epoch (``created_ms // 86_400_000``).
"""

from __future__ import annotations

from typing import Any

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

from fleetgate.store import columns

__all__ = [
    "day_cohorts",
    "day_users",
    "events",
    "grounding",
    "marks",
    "user_lasts",
    "metadata",
    "quality_hours",
    "requests",
    "reviews",
    "user_days",
    "users",
]

metadata = MetaData()


def _unit(name: str) -> Column[Any]:
    """A whole-number key part that is not a row counter (a day, an hour, a rollup unit)."""
    return Column(name, Integer, primary_key=True, autoincrement=False)


def _team_key() -> Column[Any]:
    """``team_id`` in a primary key ('' for the master key)."""
    return Column("team_id", String(40), primary_key=True)


def _user_key(*, plan: bool) -> list[Column[Any]]:
    """An end user of a team (and, with ``plan``, on one plan) as a primary key."""
    key = [_team_key(), Column("end_user", String(200), primary_key=True)]
    return [*key, Column("plan", String(32), primary_key=True)] if plan else key


def _answer_scope() -> list[Column[Any]]:
    """When and whose an answer was: ``created_ms``, ``team_id``, ``alias`` and ``version``
    (None: the alias had no versions)."""
    return [
        columns.created_ms(),
        columns.team_id(required=True),
        Column("alias", String(200), nullable=False),
        Column("version", String(64)),
    ]


def _spent() -> list[Column[Any]]:
    """Summed tokens and cost: ``input_tokens``, ``output_tokens``, ``cost_nusd``."""
    names = ("input_tokens", "output_tokens", "cost_nusd")
    return [Column(name, BigInteger, nullable=False) for name in names]


requests = Table(
    "fg_insight_requests",
    metadata,
    columns.request_id(),
    columns.created_ms(),
    Column("day", Integer, nullable=False),
    columns.team_id(required=True),  # '' for the master key
    columns.key_id(required=True),
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
    # the request's thread: its conversation, else its session (set by the writer)
    Column("thread", String(200)),
    Index("ix_fg_insight_requests_time", "created_ms"),
    Index("ix_fg_insight_requests_response", "response_id"),
    Index("ix_fg_insight_requests_session", "team_id", "session_id", "created_ms"),
    # a thread's (conversation, else session) requests in time order: the quality rollup of
    # an hour looks up each thread's request before the hour (`insights.hour_rollup`)
    Index("ix_fg_insight_requests_thread", "team_id", "thread", "created_ms", "request_id"),
)

# One row per day, end user and plan (a plan change within a day: two rows).
user_days = Table(
    "fg_insight_user_days",
    metadata,
    Column("day", Integer, primary_key=True),
    *_user_key(plan=True),
    Column("requests", Integer, nullable=False),
    *_spent(),
    # a user's earlier days (the day rollup's previous active day)
    Index("ix_fg_insight_user_days_user", "team_id", "end_user", "plan", "day"),
)

# One row per end user: the first day seen (its cohort), the plan then, the first paid day.
users = Table(
    "fg_insight_users",
    metadata,
    *_user_key(plan=False),
    Column("first_day", Integer, nullable=False),
    Column("first_plan", String(32), nullable=False),
    Column("paid_day", Integer),  # None: never on a paid plan
    Index("ix_fg_insight_users_first", "first_day"),
)

# Per end user and plan ('': any plan), its first and last active days and the one before the
# last (-1: none), upserted by the writer whatever order rows come in: the newest day's users
# and their previous and first days are read here (`insights.day_rollup`, for today).
user_lasts = Table(
    "fg_insight_user_lasts",
    metadata,
    *_user_key(plan=True),
    Column("last_day", Integer, nullable=False),
    Column("prev_day", Integer, nullable=False),
    Column("first_day", Integer, nullable=False),
    Index("ix_fg_insight_user_lasts_last", "last_day"),
)

# Explicit feedback and adoption events, one of each category per request (the last one wins).
events = Table(
    "fg_insight_events",
    metadata,
    columns.request_id(),
    Column("category", String(16), primary_key=True),  # feedback | adoption
    Column("value", String(16), nullable=False),  # up, down | accepted, edited, rejected
    *_answer_scope(),
)

# Groundedness of sampled RAG answers against the documents retrieved for them.
grounding = Table(
    "fg_insight_grounding",
    metadata,
    Column("sample_id", String(100), primary_key=True),
    *_answer_scope(),
    Column("score", Float, nullable=False),
    Column("grounded", Integer, nullable=False),  # 1: score >= the threshold then
    Index("ix_fg_insight_grounding_time", "created_ms"),
)

# Requests sampled for human review, and their rubric scores.
reviews = Table(
    "fg_insight_reviews",
    metadata,
    columns.request_id(),
    *_answer_scope(),
    Column("prompt", JSON),  # None where the team does not log payloads
    Column("response", Text),
    Column("scores", JSON),  # criterion -> 1..5; None: not scored yet
    Column("score", Float),  # the mean of ``scores``
    Column("reviewer", String(40)),
    Column("scored_ms", BigInteger),
    Index("ix_fg_insight_reviews_time", "created_ms"),
)

# One row per rollup unit: kind 'b' (a UTC day's business figures: unit = the day) or 'q' (a UTC
# hour's quality figures: unit = created_ms // 3_600_000). ``writes``: bumped in the
# transaction of every write to the unit; ``closed``: the sum of ``writes`` over the units the
# stored rollup depends on, when it was computed (None: none stored); ``param``: the follow-up
# window (ms) a quality hour was computed with.
marks = Table(
    "fg_insight_marks",
    metadata,
    Column("kind", String(1), primary_key=True),
    _unit("unit"),
    Column("writes", BigInteger, nullable=False),
    Column("closed", BigInteger),
    Column("param", BigInteger, nullable=False),
)

# A closed day's users by plan ('': any plan) and by the day each was last active before it
# on that plan (-1: never): summable, so distinct users over any range are exact (a user
# counts on the first day of the range it was active, where its previous day is before it).
day_users = Table(
    "fg_insight_day_users",
    metadata,
    _unit("day"),
    _team_key(),
    Column("plan", String(32), primary_key=True),
    _unit("prev_day"),
    Column("users", Integer, nullable=False),
    Column("requests", BigInteger, nullable=False),
    *_spent(),
)

# A closed day's active users by the day each was first seen (its cohort).
day_cohorts = Table(
    "fg_insight_day_cohorts",
    metadata,
    _unit("day"),
    _team_key(),
    _unit("first_day"),
    Column("users", Integer, nullable=False),
)

# A closed hour's quality figures (`insights.quality`) per team, alias and version ('': none).
quality_hours = Table(
    "fg_insight_quality_hours",
    metadata,
    _unit("hour"),
    _team_key(),
    Column("alias", String(200), primary_key=True),
    Column("version", String(64), primary_key=True),
    *(
        Column(name, BigInteger, nullable=False)
        for name in (
            "requests",
            "streamed",
            "abandoned",
            "regenerated",
            "feedback_up",
            "feedback_down",
            "accepted",
            "edited",
            "rejected",
            "grounding_samples",
            "grounded",
            "reviews_scored",
        )
    ),  # fmt: skip
    Column("review_score_sum", Float, nullable=False),
)
