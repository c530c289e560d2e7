"""The batch lane's tables: uploaded files with their bytes (every replica reads the same ones,
no shared volume needed), batches with the lease of the replica driving each, and one row per
finished line, written before the line counts as done (a restart resumes from them).

Created by ``batches/migrations`` (0007, 0012).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from fleetgate.store import columns
from fleetgate.store.tables import metadata

__all__ = ["TIMED_STATUSES", "batch_results", "batches", "files"]

# The statuses a batch keeps the time of (``<status>_ms``, None until reached), which the batch
# object shows as ``<status>_at``.
TIMED_STATUSES = (
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)

files = Table(
    "fg_files",
    metadata,
    columns.string_id(),  # file-<hex>
    columns.owner(),
    Column("purpose", String(32), nullable=False),  # batch | batch_output
    Column("filename", String(255), nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("content", LargeBinary, nullable=False),
    columns.created_ms(),
    Index("ix_fg_files_owner", "owner", "created_ms"),
)

batches = Table(
    "fg_batches",
    metadata,
    columns.string_id(),  # batch_<hex>
    columns.owner(),
    columns.key_id(required=True),  # whose key the lines run with
    Column("endpoint", String(64), nullable=False),
    Column("input_file_id", String(40), nullable=False),
    Column("completion_window", String(8), nullable=False),
    Column("status", String(16), nullable=False),
    Column("total", Integer, nullable=False),
    Column("output_file_id", String(40)),
    Column("error_file_id", String(40)),
    Column("errors", JSON),  # batch-level errors (OpenAI's ``errors.data``)
    Column("meta", JSON),  # the caller's ``metadata``
    columns.created_ms(),
    *columns.moments_ms(*(f"{status}_ms" for status in TIMED_STATUSES)),
    Column("expires_ms", BigInteger, nullable=False),
    Column("lease_owner", String(64)),  # the replica driving it
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("principal", JSON),  # what its creator was allowed (batches/grant.py), per line
    Column("line_attempts", JSON),  # {line: times sent} of lines sent but not yet recorded
    Index("ix_fg_batches_owner", "owner", "created_ms"),
    Index("ix_fg_batches_status", "status"),
)

batch_results = Table(
    "fg_batch_results",
    metadata,
    Column("batch_id", String(40), ForeignKey("fg_batches.id"), primary_key=True),
    Column("line", Integer, primary_key=True),  # 1-based line of the input file
    Column("custom_id", String(512)),  # None for a line that could not be read
    Column("ok", Boolean, nullable=False),  # output file (True) or error file (False)
    Column("record", Text, nullable=False),  # the output or error file's JSON line
    columns.created_ms(),
    UniqueConstraint("batch_id", "custom_id", name="fg_batch_results_custom_id"),
)
