"""`DocumentStore`: team documents, their chunks and embeddings in the database, so that every
replica retrieves the same documents and a restart loses none.

Tables ``fg_documents`` (one row per document: its size and chunk count) and
``fg_document_chunks`` (text and float32 embedding per chunk). Every change is one transaction
that also bumps the ``documents`` shared-state version and the team's own version (the row
``("documents", team)`` of ``fg_shared_state``), which is how other replicas learn which teams
to reload (`fleetgate.resources.SharedStates`). A team's limits (documents, bytes) are checked
inside that transaction, after the version bump has serialised the writers, so two uploads on
two replicas cannot both squeeze under the limit.

Example::

    store = DocumentStore(db)                      # a migrated database
    await store.put("team-a", "handbook", size, chunks, vectors, max_bytes=1 << 20)
    team = await store.load("team-a")              # every chunk with its vector
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.errors import PayloadTooLarge
from fleetgate.multimodal.tables import document_chunks, documents
from fleetgate.store.database import Database
from fleetgate.store.shared import bump_version, upsert
from fleetgate.store.tables import shared_state

__all__ = ["DOCUMENTS_KIND", "DocumentStore", "StoredTeam"]

DOCUMENTS_KIND = "documents"

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class StoredTeam:
    """A team's chunks in a stable order, with their vectors (None: no chunks)."""

    version: int
    doc_ids: list[str]
    texts: list[str]
    vectors: Vectors | None
    doc_bytes: dict[str, int]


class DocumentStore:
    """The durable, shared home of team documents."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def put(
        self,
        team: str,
        doc_id: str,
        size: int,
        chunks: Sequence[str],
        vectors: Vectors,
        *,
        max_bytes: int | None = None,
        max_documents: int | None = None,
    ) -> int:
        """Store (or replace) one document; `PayloadTooLarge` past the team's limits. Returns
        the team's new version."""
        now = int(time.time() * 1000)
        async with self.db.engine.begin() as conn:
            version = await bump_version(conn, DOCUMENTS_KIND)  # serialises document writers
            await self._check_limits(conn, team, doc_id, size, max_bytes, max_documents)
            await self._delete(conn, team, doc_id)
            if chunks:
                blobs = np.ascontiguousarray(vectors, dtype="<f4")
                await conn.execute(
                    insert(document_chunks),
                    [
                        {"team": team, "doc_id": doc_id, "seq": i, "text": text,
                         "embedding": blobs[i].tobytes()}
                        for i, text in enumerate(chunks)
                    ],
                )  # fmt: skip
            await conn.execute(
                insert(documents).values(
                    team=team, doc_id=doc_id, bytes=size, chunks=len(chunks), updated_ms=now
                )
            )
            await upsert(conn, DOCUMENTS_KIND, team, {"version": version})
            return version

    async def remove(self, team: str, doc_id: str) -> int:
        """Drop a document (absent: nothing but the version changes); the team's new version."""
        async with self.db.engine.begin() as conn:
            version = await bump_version(conn, DOCUMENTS_KIND)
            await self._delete(conn, team, doc_id)
            await upsert(conn, DOCUMENTS_KIND, team, {"version": version})
            return version

    async def load(self, team: str) -> StoredTeam:
        """Everything the team keeps, in one read transaction."""
        async with self.db.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(
                        document_chunks.c.doc_id,
                        document_chunks.c.text,
                        document_chunks.c.embedding,
                    )
                    .where(document_chunks.c.team == team)
                    .order_by(document_chunks.c.doc_id, document_chunks.c.seq)
                )  # fmt: skip
            ).all()
            sizes = await conn.execute(
                select(documents.c.doc_id, documents.c.bytes).where(documents.c.team == team)
            )
            doc_bytes = {str(d): int(n) for d, n in sizes}
            marker = await conn.scalar(
                select(shared_state.c.body).where(
                    shared_state.c.kind == DOCUMENTS_KIND, shared_state.c.name == team
                )
            )
        version = marker.get("version", 0) if isinstance(marker, dict) else 0
        vectors = (
            np.vstack([np.frombuffer(r.embedding, dtype="<f4") for r in rows]).astype(np.float32)
            if rows
            else None
        )
        return StoredTeam(
            int(version), [r.doc_id for r in rows], [r.text for r in rows], vectors, doc_bytes
        )

    async def _check_limits(
        self,
        conn: AsyncConnection,
        team: str,
        doc_id: str,
        size: int,
        max_bytes: int | None,
        max_documents: int | None,
    ) -> None:
        others = (
            await conn.execute(
                select(func.count(), func.coalesce(func.sum(documents.c.bytes), 0)).where(
                    documents.c.team == team, documents.c.doc_id != doc_id
                )
            )
        ).one()
        count, total = int(others[0]), int(others[1]) + size
        if max_documents is not None and count + 1 > max_documents:
            raise PayloadTooLarge(
                f"team {team!r} already keeps {count} documents, the limit",
                code="team_documents_full",
            )
        if max_bytes is not None and total > max_bytes:
            raise PayloadTooLarge(
                f"team {team!r}'s documents would take {total} bytes, over the "
                f"{max_bytes} byte limit",
                param="text",
                code="team_documents_full",
            )

    async def _delete(self, conn: AsyncConnection, team: str, doc_id: str) -> None:
        for table in (document_chunks, documents):
            await conn.execute(delete(table).where(table.c.team == team, table.c.doc_id == doc_id))
