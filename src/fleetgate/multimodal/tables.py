"""The multimodal pipeline's tables: conversations with their turns (``mm_*``, older: times in
float seconds) and team documents with their embedded chunks, shared by every replica.

Created by ``multimodal/migrations/0004_conversations.py`` (conversations) and by the ground
floor's ``0005_shared_state`` (documents, created with the shared state in one revision).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from fleetgate.store import columns
from fleetgate.store.tables import metadata

__all__ = ["conversation_turns", "conversations", "document_chunks", "documents"]

conversations = Table(
    "mm_conversations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(128), nullable=False, index=True),
    Column("user_id", String(128)),
    Column("created_at", Float, nullable=False),
)

conversation_turns = Table(
    "mm_turns",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("mm_conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("seq", Integer, nullable=False),
    Column("role", String(32), nullable=False),
    Column("content", JSON, nullable=False),
    Column("request_id", String(128)),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("conversation_id", "seq", name="mm_turns_conv_seq"),
)

documents = Table(
    "fg_documents",
    metadata,
    *columns.team_document_key(),
    Column("bytes", Integer, nullable=False),
    Column("chunks", Integer, nullable=False),
    columns.updated_ms(),
)

document_chunks = Table(
    "fg_document_chunks",
    metadata,
    *columns.team_document_key(),
    Column("seq", Integer, primary_key=True),
    Column("text", Text, nullable=False),
    Column("embedding", LargeBinary, nullable=False),  # float32, little-endian, L2-normalised
)
