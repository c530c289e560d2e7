"""The console's table: sign-in sessions shared by every replica.

Created by ``tenancy/migrations/0011_spend_rollup.py`` (one revision with the spend rollup);
``flash`` added by ``tenancy/migrations/0013_key_last_used.py`` (with the keys' last use).
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Index, LargeBinary, String, Table

from fleetgate.store import columns
from fleetgate.store.tables import metadata

__all__ = ["console_sessions"]

# Console sign-in sessions, shared by every replica: the SHA-256 of the cookie's session id (the
# id itself is never stored) and the credential sealed with a key derived from that id.
console_sessions = Table(
    "fg_console_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("via", String(8), nullable=False),  # "key" | "oidc"
    Column("role", String(16), nullable=False),
    Column("team_id", String(40)),
    Column("principal", JSON, nullable=False),  # the rest of the Principal
    Column("name", String(200), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("sealed_token", LargeBinary, nullable=False),
    columns.created_ms(),
    Column("expires_ms", BigInteger, nullable=False),
    Column("flash", LargeBinary),  # a one-time message for the next page, sealed (0013)
    Index("ix_fg_console_sessions_expires", "expires_ms"),
    Index("ix_fg_console_sessions_created", "created_ms"),
)
