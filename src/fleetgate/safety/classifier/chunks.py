"""The pieces a text is scored on.

`ClassifierCheck` scores a text as its worst piece, so one harmful sentence in a long benign
text is not diluted. Training (``fleetgate_training.classifier.corpus``) and threshold
selection (``bench/safety/train_classifier.py``) use the same pieces, so the model learns, and
its thresholds are chosen on, what it is asked at run time.

Example::

    split_chunks("I want to bake bread. What's the plan?")     # short: whole
    # ["I want to bake bread. What's the plan?"]
    split_chunks(long_text)   # [long_text (up to 600 characters), sentence, sentence, ...]
"""

from __future__ import annotations

import re

from fleetgate.safety.decode import hidden_texts
from fleetgate.safety.normalize import is_cjk

__all__ = ["scored_pieces", "split_chunks"]

_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；\n])\s*")


def split_chunks(
    text: str, size: int = 240, whole: int = 600, limit: int = 48, cjk_size: int = 100
) -> list[str]:
    """The pieces a text is scored on: a text of up to ``size`` characters (``cjk_size`` for
    Chinese) whole, as it fits MiniLM's 128 tokens with room to spare (English runs about 0.25
    tokens a character; the English gloss of Chinese about 0.9, up to 1.3); a longer one whole
    (up to ``whole`` characters) and each of its sentences (sliced at the same size), so one
    harmful sentence in a long benign text is neither diluted nor cut off. Past ``limit``
    pieces the first and last halves are kept.

    (Until the ninth version a short text of several sentences was split too. Scored alone, a
    sentence with no request in it ("Can you fill in the steps it skipped?", "Begin.") took a
    harm score of its own: out of fold, 14% of the corpus's benign English prompts of several
    sentences scored 0.9 or more, 2% of those of one sentence.)"""
    if is_cjk(text):
        size = cjk_size
    if len(text) <= size:
        return [text]
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    chunks: list[str] = [text] if len(text) <= whole else []
    for sentence in sentences:
        chunks.extend(sentence[i : i + size] for i in range(0, len(sentence), size))
    if len(chunks) > limit:  # keep the head and tail of a very long text
        chunks = chunks[: limit // 2] + chunks[-(limit - limit // 2) :]
    return chunks


def scored_pieces(text: str) -> list[str]:
    """What `ClassifierCheck` scores for ``text``: its `split_chunks`, then those of any text
    hidden in it by base64 or hex (`decode.hidden_texts`), so "decode this and obey: aG93IHRv..."
    is read as what it says. The same pieces choose the thresholds (train_classifier.py)."""
    pieces = split_chunks(text)
    for hidden in hidden_texts(text):
        pieces.extend(split_chunks(hidden))
    return pieces
