"""What the simulated model says: echo of the last user message, or seeded random words."""

from __future__ import annotations

import hashlib
import random

from fleetgate.sim.tokenizer import split_pieces

__all__ = ["WORDS", "corrupted", "plan_output"]

# Words of at most four characters: each is exactly one token of the simulator's tokenizer, so
# re-tokenizing an answer gives the same count as ``completion_tokens``.
WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "this", "are", "or", "from", "at", "but", "have", "an", "they", "you",
    "were", "one", "all", "we", "can", "has", "been", "if", "more", "when", "will", "who",
    "so", "no", "data", "time", "node", "rack", "fast", "slow", "blue", "red", "tree", "lake",
    "road", "book", "cat", "dog", "sun", "moon", "star", "rain", "snow", "wind", "fire", "sea",
    "hill", "cave",
)  # fmt: skip


def _random_pieces(count: int, rng: random.Random) -> list[str]:
    words = rng.choices(WORDS, k=count)
    pieces = [" " + w for w in words]
    if pieces:
        pieces[0] = words[0].capitalize()
    return pieces


def corrupted(text: str, fraction: float, after_tokens: int = 0) -> str:
    """``text``, or, for a ``fraction`` of texts chosen by their hash (the same texts on every
    run and every process), as many seeded random words instead: a model that is wrong on a
    known share of the answers (the quantization gate's tests). With ``after_tokens`` N, a
    corrupted text keeps its first N tokens and only the rest is replaced: a build that
    degrades late, which only long generations show."""
    if fraction <= 0.0:
        return text
    digest = hashlib.sha256(text.encode()).digest()
    if int.from_bytes(digest[:8], "big") / 2**64 >= fraction:
        return text
    rng = random.Random(digest)
    pieces = split_pieces(text)
    kept = pieces[:after_tokens]
    if len(kept) == len(pieces):
        return text  # the text ends before the corruption starts
    fresh = _random_pieces(max(1, len(pieces) - len(kept)), rng)
    if kept:
        fresh[0] = " " + fresh[0].strip().lower()
    return "".join(kept + fresh)


def plan_output(
    *,
    mode: str,
    echo_text: str,
    max_tokens: int | None,
    default_len: int,
    ignore_eos: bool,
    rng: random.Random,
) -> tuple[list[str], str]:
    """The output pieces of one choice and its finish reason (``stop`` or ``length``).

    - random: ``max_tokens`` words (finish ``length``), or ``default_len`` when no limit was
      given (finish ``stop``).
    - echo: the pieces of ``echo_text``, cut to ``max_tokens`` (finish ``length``); with
      ``ignore_eos`` the text repeats until ``max_tokens``.
    """
    if mode == "random":
        if max_tokens is None:
            return _random_pieces(default_len, rng), "stop"
        return _random_pieces(max_tokens, rng), "length"
    pieces = split_pieces(echo_text)
    limit = max_tokens if max_tokens is not None else default_len
    if ignore_eos and max_tokens is not None and pieces:
        while len(pieces) < max_tokens:
            pieces.extend(pieces[: max_tokens - len(pieces)])
    if len(pieces) > limit:
        return pieces[:limit], "length"
    if ignore_eos and max_tokens is not None and len(pieces) == max_tokens:
        return pieces, "length"
    return pieces, "stop"
