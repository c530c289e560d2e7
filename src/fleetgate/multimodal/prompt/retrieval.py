"""A small embedding index over a team's uploaded documents (cosine top-k), kept in the
database by `fleetgate.multimodal.prompt.documents.DocumentStore` when given one.

The index embeds with a `fleetgate.resources.Embedder`, in the gateway
`fleetgate.resources.MiniLMEmbedder` over the process's one
all-MiniLM-L6-v2 (shared with the semantic router and the safety classifier). Embedding runs in
an executor.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetgate.errors import PayloadTooLarge
from fleetgate.multimodal.prompt.documents import DocumentStore
from fleetgate.resources.embedder import Embedder, Vectors

__all__ = ["DocumentIndex", "DocumentSet", "RetrievedChunk", "split_text"]

log = logging.getLogger("fleetgate.multimodal.retrieval")


def split_text(text: str, *, max_chars: int = 600) -> list[str]:
    """Chunks of at most ~``max_chars``, cut between paragraphs, then sentences."""
    pieces = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    chunks: list[str] = []
    for piece in pieces:
        sentences = re.split(r"(?<=[.!?。！？])\s*", piece)
        current = ""
        for sentence in (s for s in sentences if s):
            if current and len(current) + len(sentence) + 1 > max_chars:
                chunks.append(current)
                current = ""
            current = f"{current} {sentence}".strip()
            while len(current) > max_chars:
                chunks.append(current[:max_chars])
                current = current[max_chars:]
        if current:
            chunks.append(current)
    return chunks


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    doc_id: str
    text: str
    score: float


@dataclass(frozen=True, slots=True)
class DocumentSet:
    """A team's whole document collection at one version: ``documents`` is ``(doc_id,
    chunks)`` by doc_id, each document's chunks in order (a stable prompt prefix)."""

    team: str
    version: int
    documents: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def chars(self) -> int:
        return sum(len(c) for _, chunks in self.documents for c in chunks)


@dataclass(slots=True)
class _TeamIndex:
    doc_ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    vectors: Vectors | None = None
    doc_bytes: dict[str, int] = field(default_factory=dict)  # counted before embedding
    version: int = 0  # the stored team's version this copy reflects
    doc_set: DocumentSet | None = None  # built on first use, for `version`


class DocumentIndex:
    """Per-team vector index, at most ``max_team_documents`` documents and ``max_team_bytes``
    of UTF-8 text per team (`PayloadTooLarge` past either).

    With a ``store`` (`fleetgate.multimodal.prompt.documents.DocumentStore`) documents and
    their embeddings are kept in the database, and this object is each replica's cache of them:
    a team is loaded on its first search and dropped when `follow` hears that its version moved
    (an upload or delete on any replica). Without one, documents live in this process only.

    Example::

        index = DocumentIndex(MiniLMEmbedder(resources.minilm), store=DocumentStore(db))
        await index.add("team-a", "handbook", handbook_text)
        hits = await index.search("team-a", "how many vacation days?", k=3)
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        chunk_chars: int = 600,
        executor: Executor | None = None,
        max_team_bytes: int | None = None,
        max_team_documents: int | None = None,
        store: DocumentStore | None = None,
    ) -> None:
        self._embedder = embedder
        self._chunk_chars = chunk_chars
        self._executor = executor
        self._max_bytes = max_team_bytes
        self._max_documents = max_team_documents
        self.store = store
        self._teams: dict[str, _TeamIndex] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        # Called with the team after each upload or delete made through this process.
        self.listeners: list[Callable[[str], None]] = []

    def _changed(self, team: str) -> None:
        for listener in self.listeners:
            listener(team)

    def usage(self, team: str) -> tuple[int, int]:
        """``(documents, UTF-8 bytes)`` this process holds for the team (uploads in progress
        included; with a store, as of the team's last load)."""
        idx = self._teams.get(team)
        if idx is None:
            return 0, 0
        return len(idx.doc_bytes), sum(idx.doc_bytes.values())

    def _reserve(self, team: str, doc_id: str, size: int) -> _TeamIndex:
        # Counted before the (slow) embedding, so concurrent uploads cannot both fit.
        idx = self._teams.setdefault(team, _TeamIndex())
        others = {d: n for d, n in idx.doc_bytes.items() if d != doc_id}
        if self._max_documents is not None and len(others) + 1 > self._max_documents:
            raise PayloadTooLarge(
                f"team {team!r} already keeps {len(others)} documents, the limit",
                code="team_documents_full",
            )
        total = sum(others.values()) + size
        if self._max_bytes is not None and total > self._max_bytes:
            raise PayloadTooLarge(
                f"team {team!r}'s documents would take {total} bytes, over the "
                f"{self._max_bytes} byte limit",
                param="text",
                code="team_documents_full",
            )
        idx.doc_bytes[doc_id] = size
        return idx

    async def _embed(self, texts: Sequence[str]) -> Vectors:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._embedder.encode, list(texts))

    async def add(self, team: str, doc_id: str, text: str) -> int:
        """Index (or re-index) one document; returns the number of chunks."""
        chunks = split_text(text, max_chars=self._chunk_chars)
        if not chunks:
            await self.remove(team, doc_id)
            return 0
        size = len(text.encode("utf-8", "surrogatepass"))
        if self.store is not None:
            await self._team(team)  # the stored documents count toward the limits
            self._reserve(team, doc_id, size)  # a cheap early refusal, before embedding
            try:
                vectors = await self._embed(chunks)
                await self.store.put(
                    team, doc_id, size, chunks, vectors,
                    max_bytes=self._max_bytes, max_documents=self._max_documents,
                )  # fmt: skip
            finally:
                self._teams.pop(team, None)  # reloaded from the store on the next search
            self._changed(team)
            return len(chunks)
        self._drop(team, doc_id)
        idx = self._reserve(team, doc_id, size)
        try:
            vectors = await self._embed(chunks)
        except BaseException:
            idx.doc_bytes.pop(doc_id, None)
            raise
        idx.doc_bytes[doc_id] = size  # a concurrent remove() may have dropped the reservation
        idx.doc_ids += [doc_id] * len(chunks)
        idx.texts += chunks
        idx.vectors = vectors if idx.vectors is None else np.vstack([idx.vectors, vectors])
        idx.version += 1
        self._changed(team)
        return len(chunks)

    async def remove(self, team: str, doc_id: str) -> None:
        """Drop a document's chunks (on every replica, with a store)."""
        if self.store is not None:
            await self.store.remove(team, doc_id)
            self._teams.pop(team, None)
        else:
            self._drop(team, doc_id)
        self._changed(team)

    def _drop(self, team: str, doc_id: str) -> None:
        idx = self._teams.get(team)
        if idx is None:
            return
        idx.version += 1
        idx.doc_bytes.pop(doc_id, None)
        if idx.vectors is None or doc_id not in idx.doc_ids:
            return
        keep = [i for i, d in enumerate(idx.doc_ids) if d != doc_id]
        idx.doc_ids = [idx.doc_ids[i] for i in keep]
        idx.texts = [idx.texts[i] for i in keep]
        idx.vectors = idx.vectors[keep] if keep else None

    async def _team(self, team: str) -> _TeamIndex | None:
        """The team's index, loaded from the store when this process has none yet."""
        idx = self._teams.get(team)
        if idx is not None or self.store is None:
            return idx
        lock = self._loading.setdefault(team, asyncio.Lock())
        async with lock:
            idx = self._teams.get(team)
            if idx is None:
                stored = await self.store.load(team)
                idx = _TeamIndex(
                    stored.doc_ids, stored.texts, stored.vectors, stored.doc_bytes, stored.version
                )
                self._teams[team] = idx
        self._loading.pop(team, None)
        return idx

    def follow(self, teams: dict[str, Any]) -> None:
        """The stored documents changed: forget every team whose version moved (reloaded on
        its next search). ``teams``: ``{team: {"version": n}}`` from the shared state."""
        for team, idx in list(self._teams.items()):
            marker = teams.get(team)
            version = marker.get("version", 0) if isinstance(marker, dict) else 0
            if version != idx.version:
                self._teams.pop(team, None)

    async def document_set(self, team: str) -> DocumentSet | None:
        """The team's whole collection (None: no documents, or the store is away)."""
        try:
            idx = await self._team(team)
        except Exception as exc:  # the store is away: answer without documents, not fail
            log.warning("team %s documents not loaded (%s); no document set", team, exc)
            return None
        if idx is None or not idx.texts:
            return None
        if idx.doc_set is not None and idx.doc_set.version == idx.version:
            return idx.doc_set
        by_doc: dict[str, list[str]] = {}
        for doc_id, text in zip(idx.doc_ids, idx.texts, strict=True):
            by_doc.setdefault(doc_id, []).append(text)
        docs = tuple((d, tuple(by_doc[d])) for d in sorted(by_doc))
        idx.doc_set = DocumentSet(team, idx.version, docs)
        return idx.doc_set

    async def search(
        self, team: str, query: str, *, k: int = 3, min_score: float = -1.0
    ) -> list[RetrievedChunk]:
        """The ``k`` chunks most similar to ``query`` (cosine), best first."""
        if not query.strip():
            return []
        try:
            idx = await self._team(team)
        except Exception as exc:  # the store is away: answer without documents, not fail
            log.warning("team %s documents not loaded (%s); retrieving nothing", team, exc)
            return []
        if idx is None or idx.vectors is None:
            return []
        vectors, doc_ids, texts = idx.vectors, idx.doc_ids, idx.texts
        q = (await self._embed([query]))[0]
        scores = vectors @ q
        order = np.argsort(-scores)[:k]
        return [
            RetrievedChunk(doc_ids[i], texts[i], float(scores[i]))
            for i in order
            if scores[i] >= min_score
        ]
