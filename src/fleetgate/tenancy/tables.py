"""Tenancy's tables: teams, users, virtual keys, spend (rows, tags and the hourly and daily
rollup), the audit log (requests, guardrail verdicts, admin actions), budget alerts and the
change counter every replica polls.

Created by the migrations in ``tenancy/migrations`` (0001, 0002, 0003, 0009, 0011, 0013). Times are
integer milliseconds since the epoch and money is integer nano-USD, so SQLite and PostgreSQL
store, compare and sum them identically and a report adds up to the cent. ``fg_safety_audit``
is here, not in ``safety/``: the record writer (`fleetgate.tenancy.records`) writes it with the
other audit rows in one transaction; safety reads it.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from fleetgate.store import columns
from fleetgate.store.after_insert import after_insert
from fleetgate.store.tables import metadata
from fleetgate.tenancy.rollup import SPEND_ROLLUP

__all__ = [
    "admin_audit",
    "api_keys",
    "budget_alerts",
    "request_audit",
    "safety_audit",
    "spend",
    "spend_rollup",
    "spend_tags",
    "teams",
    "tenancy_state",
    "users",
]

teams = Table(
    "fg_teams",
    metadata,
    columns.string_id(),
    Column("name", String(200), nullable=False, unique=True),
    *columns.limits(),
    Column("log_payloads", Boolean, nullable=False, default=False),
    Column("tags", JSON, nullable=False, default=dict),
    columns.created_ms(),
)

users = Table(
    "fg_users",
    metadata,
    columns.string_id(),
    columns.team_id(required=True, references_teams=True),
    Column("name", String(200), nullable=False),
    columns.created_ms(),
)

api_keys = Table(
    "fg_api_keys",
    metadata,
    columns.string_id(),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("key_hint", String(32), nullable=False),
    columns.team_id(required=True, references_teams=True),
    Column("user_id", String(40)),
    Column("role", String(16), nullable=False, default="user"),
    Column("aliases", JSON),
    *columns.limits(),
    Column("tags", JSON, nullable=False, default=dict),
    *columns.moments_ms("expires_ms", "revoked_ms"),
    columns.created_ms(),
    Column("last_used_ms", BigInteger),  # at most a minute stale per process (tenancy.key_use)
)

spend = Table(
    "fg_spend",
    metadata,
    columns.request_id(),
    *columns.request_scope(required=True),
    Column("deployment", String(200)),
    Column("version", String(64)),
    Column("status", Integer, nullable=False),
    *columns.token_counts(),
    # Prompt tokens written to the upstream's prompt cache; NULL in rows from before 0010.
    Column("cache_write_tokens", Integer),
    Column("cost_nusd", BigInteger, nullable=False),
    Column("latency_ms", Integer, nullable=False),
    Column("tags", JSON, nullable=False, default=dict),
    Index("ix_fg_spend_team_time", "team_id", "created_ms"),
    Index("ix_fg_spend_key_time", "key_id", "created_ms"),
    Index("ix_fg_spend_time", "created_ms"),  # the partial hours at a report's edges
    info=after_insert(SPEND_ROLLUP),  # every bulk insert adds its new rows to the rollup
)

spend_tags = Table(
    "fg_spend_tags",
    metadata,
    Column("request_id", String(100), primary_key=True),
    Column("tag", String(300), primary_key=True),
)

# Spend summed per hour and per UTC day (``period_ms``), one row per dimension value: ``dim``
# is team, key, alias, deployment, version or tag, ``group_value`` the key id, alias, ... ('' for
# the team dimension and for a missing deployment, version, tag or team). Written with the spend
# rows in their transaction (`fleetgate.tenancy.rollup`); reports read it (`spend_query`).
spend_rollup = Table(
    "fg_spend_rollup",
    metadata,
    Column("dim", String(16), primary_key=True),
    Column("period_ms", BigInteger, primary_key=True),
    Column("start_ms", BigInteger, primary_key=True),
    Column("team_id", String(40), primary_key=True),
    Column("group_value", String(300), primary_key=True),
    Column("requests", BigInteger, nullable=False),
    *columns.token_counts(BigInteger),
    Column("cache_write_tokens", BigInteger, nullable=False),
    Column("cost_nusd", BigInteger, nullable=False),
    sqlite_with_rowid=False,  # every lookup is by the primary key: keep the rows in it
)

request_audit = Table(
    "fg_request_audit",
    metadata,
    columns.request_id(),
    *columns.request_scope(required=True),
    Column("decision", String(32), nullable=False),
    Column("status", Integer, nullable=False),
    Column("error_type", String(64)),
    Column("prompt", JSON),
    Column("response", Text),
    Index("ix_fg_request_audit_team_time", "team_id", "created_ms"),
)

safety_audit = Table(
    "fg_safety_audit",
    metadata,
    Column("id", String(100), primary_key=True),  # the request id: a replay never duplicates
    Column("request_id", String(100)),
    *columns.request_scope(required=False),
    Column("flagged", Boolean, nullable=False),
    Column("categories", JSON, nullable=False),
    Column("verdicts", JSON, nullable=False),
    Column("failed", Boolean, nullable=False),
    Index("ix_fg_safety_audit_time", "created_ms"),
    Index("ix_fg_safety_audit_key_time", "key_id", "created_ms"),
)

admin_audit = Table(
    "fg_admin_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    columns.created_ms(),
    Column("actor_key_id", String(40), nullable=False),
    Column("actor_team_id", String(40)),
    Column("team_id", String(40)),  # the team the action concerns (None: global)
    Column("action", String(64), nullable=False),
    Column("target", String(200)),
    Column("detail", JSON, nullable=False, default=dict),
)

budget_alerts = Table(
    "fg_budget_alerts",
    metadata,
    Column("scope", String(8), primary_key=True),
    Column("scope_id", String(40), primary_key=True),
    Column("period_start_ms", BigInteger, primary_key=True),
    Column("threshold", Integer, primary_key=True),
    Column("sent_ms", BigInteger, nullable=False),
)

tenancy_state = Table(
    "fg_tenancy_state",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", BigInteger, nullable=False),
)
