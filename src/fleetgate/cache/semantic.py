"""The semantic cache's index: per tenant and alias, the embeddings of earlier prompts.

A lookup compares the prompt's unit-length embedding (MiniLM, from the process's one loader)
with those of the same tenant, alias and context (`fleetgate.cache.keys.context_hash`: the
earlier turns and generation fields) by cosine similarity; the best at or over the threshold
and not expired is a hit. Each (tenant, alias) keeps at most ``max_entries``, oldest dropped
first. The index lives in this process (each replica learns its own).

Example::

    index = SemanticIndex()
    index.add("team_a", "bot", "ctx", vector, answer, ttl_s=600, max_entries=2000)
    index.lookup("team_a", "bot", "ctx", vector, threshold=0.92)   # -> answer
    index.lookup("team_b", "bot", "ctx", vector, threshold=0.92)   # -> None
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fleetgate.cache.answer import CachedAnswer

__all__ = ["SemanticIndex"]

Vector = npt.NDArray[np.float32]


@dataclass
class _Partition:
    contexts: list[str] = field(default_factory=list)
    vectors: list[Vector] = field(default_factory=list)
    answers: list[CachedAnswer] = field(default_factory=list)
    expires: list[float] = field(default_factory=list)
    _matrix: Vector | None = None

    def matrix(self) -> Vector:
        if self._matrix is None:
            self._matrix = np.stack(self.vectors).astype(np.float32)
        return self._matrix

    def drop_front(self, n: int) -> None:
        del self.contexts[:n], self.vectors[:n], self.answers[:n], self.expires[:n]
        self._matrix = None


class SemanticIndex:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._parts: dict[tuple[str, str], _Partition] = {}

    def size(self, tenant: str, alias: str) -> int:
        part = self._parts.get((tenant, alias))
        return 0 if part is None else len(part.answers)

    def lookup(
        self, tenant: str, alias: str, context: str, vector: Vector, threshold: float
    ) -> tuple[CachedAnswer, float] | None:
        """The closest live answer of this tenant, alias and context, and its similarity."""
        part = self._parts.get((tenant, alias))
        if part is None or not part.answers:
            return None
        scores = part.matrix() @ vector
        now = self._clock()
        for i in np.argsort(-scores):
            score = float(scores[i])
            if score < threshold:
                return None
            if part.contexts[i] == context and part.expires[i] > now:
                return part.answers[i], score
        return None

    def add(
        self,
        tenant: str,
        alias: str,
        context: str,
        vector: Vector,
        answer: CachedAnswer,
        *,
        ttl_s: float,
        max_entries: int,
    ) -> None:
        part = self._parts.setdefault((tenant, alias), _Partition())
        now = self._clock()
        stale = 0  # the oldest entries that expired (one alias's TTL: they expire in order)
        while stale < len(part.expires) and part.expires[stale] <= now:
            stale += 1
        if stale:
            part.drop_front(stale)
        part.contexts.append(context)
        part.vectors.append(vector.astype(np.float32))
        part.answers.append(answer)
        part.expires.append(now + ttl_s)
        part._matrix = None
        if len(part.answers) > max_entries:
            part.drop_front(len(part.answers) - max_entries)
