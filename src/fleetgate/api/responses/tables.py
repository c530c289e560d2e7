"""The Responses API's table: stored responses (``previous_response_id`` state), per tenant.

Created by ``api/responses/migrations/0010_responses.py``.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Index, String, Table

from fleetgate.store import columns
from fleetgate.store.tables import metadata

__all__ = ["responses"]

responses = Table(
    "fg_responses",
    metadata,
    columns.string_id(64),
    columns.owner(),
    Column("previous_id", String(64)),
    columns.created_ms(),
    Column("expires_ms", BigInteger, nullable=False),
    Column("response", JSON, nullable=False),  # the response object, as GET returns it
    Column("messages", JSON, nullable=False),  # the turn's chat messages: input, then output
    Column("input", JSON, nullable=False),  # the input items, as input_items lists them
    Index("ix_fg_responses_expires", "expires_ms"),
)
