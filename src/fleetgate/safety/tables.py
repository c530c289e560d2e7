"""Safety's table: per-key strike counts every replica agrees on.

Created by the ground floor's ``0005_shared_state`` (with the shared state, in one revision).
The guardrail audit's verdicts (``fg_safety_audit``) are written by the record writer with the
rest of the audit log: `fleetgate.tenancy.tables`.
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, String, Table

from fleetgate.store import columns
from fleetgate.store.tables import metadata

__all__ = ["safety_strikes"]

safety_strikes = Table(
    "fg_safety_strikes",
    metadata,
    Column("key_id", String(40), primary_key=True),
    Column("count", Integer, nullable=False),
    columns.updated_ms(),
)
