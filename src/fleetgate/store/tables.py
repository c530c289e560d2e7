"""The ground floor's tables, and the one `MetaData` every feature's tables are defined on.

Each feature package defines its own tables (``<feature>/tables.py``) on `metadata` and ships
the Alembic revisions that create them (``<feature>/migrations``, named by the feature class's
``migrations``); the store keeps only what every replica's ground floor uses: the shared live
state (``fg_shared_state``: admin overrides, canary splits, ...) and the per-kind change counters
each process polls (``fg_shared_versions``, `fleetgate.store.shared`), created by
``store/migrations/versions/0005_shared_state.py``. No table is ever created by ``create_all``.

Times are integer milliseconds since the epoch and money is integer nano-USD, so SQLite and
PostgreSQL store, compare and sum them identically.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, MetaData, String, Table

from fleetgate.store import columns

__all__ = ["metadata", "shared_state", "shared_versions"]

metadata = MetaData()

shared_state = Table(
    "fg_shared_state",
    metadata,
    Column("kind", String(32), primary_key=True),  # "safety_overrides", "canary_splits", ...
    Column("name", String(200), primary_key=True),
    Column("body", JSON, nullable=False),
    columns.updated_ms(),
)

shared_versions = Table(
    "fg_shared_versions",
    metadata,
    Column("kind", String(32), primary_key=True),
    Column("version", BigInteger, nullable=False),  # bumped in the same transaction as a change
)
