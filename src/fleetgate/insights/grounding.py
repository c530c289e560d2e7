"""`GroundednessScorer`: how well an answer is supported by the documents retrieved for it, in
[0, 1] (low: likely hallucinated or contradicting them).

Each answer sentence is scored on its own and the answer gets its worst sentence's score (one
unsupported claim makes the answer ungrounded). A sentence's score is its **support**, the
highest cosine similarity (MiniLM, `fleetgate.resources.embedder.Embedder`) between it and any
document sentence, less two penalties for what an embedding does not see:

- **facts**: 0.5 x the share of its numbers and capitalised names (not the first word) that
  appear nowhere in the documents ("5 years" where the documents say 2);
- **negation**: 0.25 when it and its best-supporting document sentence disagree on a negation
  ("is not refundable" against "is refundable").

Limits (see docs/insights.md): a paraphrase the embedding misses lowers the score; a
contradiction with no number, name or negation to catch ("increases" against "decreases") is
seen only as far as the embedding sees it; documents in one language and answers in another
are not compared. The score ranks answers; the threshold turns it into a flag.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from fleetgate.resources.embedder import Embedder

__all__ = ["GroundednessScorer", "sentences"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"\b[A-Z][a-zA-Z]{2,}\b")
_NEGATION = re.compile(r"\b(?:not|no|never|none|cannot|without)\b|n't\b", re.IGNORECASE)
MAX_SENTENCES = 64  # of an answer, and of each document (longer: the first ones)


def sentences(text: str, limit: int = MAX_SENTENCES) -> list[str]:
    """``text`` cut into sentences of at least three words."""
    parts = (s.strip() for s in _SENTENCE.split(text))
    return [s for s in parts if len(s.split()) >= 3][:limit]


def _facts(sentence: str) -> set[str]:
    words = sentence.split()
    first = words[0] if words else ""
    names = {n for n in _NAME.findall(sentence) if n != first.strip("\"'(")}
    return {n.replace(",", "") for n in _NUMBER.findall(sentence)} | {n.lower() for n in names}


class GroundednessScorer:
    """Blocking (it embeds): call `score` from a worker thread."""

    def __init__(self, embedder: Embedder, *, penalties: bool = True) -> None:
        self._embedder = embedder
        self._penalties = penalties  # False: the embedding's support alone (a baseline)

    def score(self, answer: str, documents: Sequence[str]) -> float:
        claims = sentences(answer)
        support = [s for doc in documents for s in sentences(doc)]
        if not claims:
            return 1.0  # nothing claimed
        if not support:
            return 0.0  # claims with nothing retrieved to back them
        vectors = self._embedder.encode(claims + support)
        sims = vectors[: len(claims)] @ vectors[len(claims) :].T
        corpus = " ".join(documents).lower().replace(",", "")
        worst = 1.0
        for i, claim in enumerate(claims):
            best = int(np.argmax(sims[i]))
            value = float(sims[i, best])
            if not self._penalties:
                worst = min(worst, value)
                continue
            facts = _facts(claim)
            if facts:
                missing = sum(1 for f in facts if f not in corpus)
                value -= 0.5 * missing / len(facts)
            if bool(_NEGATION.search(claim)) != bool(_NEGATION.search(support[best])):
                value -= 0.25
            worst = min(worst, value)
        return max(0.0, min(1.0, worst))
