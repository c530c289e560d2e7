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

from fleetgate.store.tables import metadata

__all__ = ["batch_results", "batches", "files"]

files = Table(
    "fg_files",
    metadata,
    Column("id", String(40), primary_key=True),  # file-<hex>
    Column("owner", String(64), nullable=False),  # the team (or key, without a team)
    Column("purpose", String(32), nullable=False),  # batch | batch_output
    Column("filename", String(255), nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("content", LargeBinary, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_fg_files_owner", "owner", "created_ms"),
)

batches = Table(
    "fg_batches",
    metadata,
    Column("id", String(40), primary_key=True),  # batch_<hex>
    Column("owner", String(64), nullable=False),
    Column("key_id", String(40), nullable=False),  # whose key the lines run with
    Column("endpoint", String(64), nullable=False),
    Column("input_file_id", String(40), nullable=False),
    Column("completion_window", String(8), nullable=False),
    Column("status", String(16), nullable=False),
    Column("total", Integer, nullable=False),
    Column("output_file_id", String(40)),
    Column("error_file_id", String(40)),
    Column("errors", JSON),  # batch-level errors (OpenAI's ``errors.data``)
    Column("meta", JSON),  # the caller's ``metadata``
    Column("created_ms", BigInteger, nullable=False),
    Column("in_progress_ms", BigInteger),
    Column("finalizing_ms", BigInteger),
    Column("completed_ms", BigInteger),
    Column("failed_ms", BigInteger),
    Column("expired_ms", BigInteger),
    Column("cancelling_ms", BigInteger),
    Column("cancelled_ms", BigInteger),
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
    Column("created_ms", BigInteger, nullable=False),
    UniqueConstraint("batch_id", "custom_id", name="fg_batch_results_custom_id"),
)
