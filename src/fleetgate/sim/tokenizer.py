"""A deterministic toy tokenizer and chat template, so token counts are stable and documented.

Tokenization rules:

1. The text is cut into *pieces* by the regex ``\\s*(?:\\w+|[^\\w\\s])|\\s+``: a word or a single
   punctuation character together with the whitespace before it (trailing whitespace is a
   piece of its own).
2. A piece whose word part is longer than 4 characters is split into 4-character chunks (the
   leading whitespace stays on the first chunk): ``" tokenizer"`` -> ``" toke", "nize", "r"``.
3. The token id is a stable hash of the piece: ``blake2b(piece, digest_size=4) % 100_000``.

Joining the pieces gives the text back exactly, which is how echo mode streams a message.

Chat template (role text counts as prompt tokens)::

    <|system|>\\n{content}\\n<|user|>\\n{content}\\n<|assistant|>\\n

Each ``image_url`` content part becomes ``image_tokens`` tokens whose id is a hash of the URL, so
the same image in the same place is a prefix-cache hit and a new image is not.

Example::

    tok = Tokenizer()
    tok.encode("Hello, world")   # 3 ids: "Hello" "," " world"
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["VOCAB_SIZE", "PromptTokens", "Tokenizer", "render_chat", "split_pieces"]

VOCAB_SIZE = 100_000
# Rules 1 and 2: a word's first (up to) 4 characters with the whitespace before it, then its
# next 4-character chunks; a punctuation character with its whitespace; trailing whitespace.
_CHUNK_RE = re.compile(r"\s*(?:\w{1,4}|[^\w\s])|\s+")
_CACHE_LIMIT = 200_000


def split_pieces(text: str) -> list[str]:
    """Cut ``text`` into token pieces; ``"".join(split_pieces(t)) == t``.

    One regex does rules 1 and 2 at once (a word's first chunk takes the whitespace before it,
    the following chunks none), several times faster than splitting words in Python: the
    simulator tokenizes in its engine's event loop, so a slow tokenizer stalls the engine's
    steps (vLLM tokenizes in its API server process, off the engine core)."""
    return _CHUNK_RE.findall(text)


def _stable_id(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=4).digest(), "little") % VOCAB_SIZE


@dataclass(frozen=True)
class PromptTokens:
    """A prompt after tokenization: its token ids and how many of them came from images."""

    ids: list[int]
    image_tokens: int = 0


class Tokenizer:
    """Encodes text to ids with a bounded piece -> id cache owned by the instance."""

    def __init__(self, image_tokens: int = 1200) -> None:
        self.image_tokens = image_tokens
        self._cache: dict[str, int] = {}

    def piece_id(self, piece: str) -> int:
        """The id of one piece."""
        tid = self._cache.get(piece)
        if tid is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            tid = self._cache[piece] = _stable_id(piece.encode())
        return tid

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        known = self._cache.get
        ids = [known(p, -1) for p in split_pieces(text)]
        if -1 in ids:
            ids = [self.piece_id(p) for p in split_pieces(text)]
        return ids

    def image_ids(self, url: str) -> list[int]:
        """The ``image_tokens`` placeholder ids of one image."""
        return [_stable_id(b"image:" + url.encode())] * self.image_tokens

    def encode_chat(self, messages: Sequence[Mapping[str, Any]]) -> PromptTokens:
        """Render ``messages`` with the chat template and tokenize, images included."""
        ids: list[int] = []
        images = 0
        for segment in render_chat(messages):
            if isinstance(segment, str):
                ids.extend(self.encode(segment))
            else:
                ids.extend(self.image_ids(segment[1]))
                images += self.image_tokens
        return PromptTokens(ids, images)


def _content_segments(content: Any, index: int) -> list[str | tuple[str, str]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise InvalidRequest(
            f"messages[{index}].content must be a string or a list", param="messages"
        )
    out: list[str | tuple[str, str]] = []
    for part in content:
        if not isinstance(part, dict):
            raise InvalidRequest(f"messages[{index}].content parts must be objects")
        kind = part.get("type")
        if kind == "text":
            out.append(str(part.get("text", "")))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise InvalidRequest(f"messages[{index}] image_url needs a url", param="messages")
            out.append(("image", url))
        # Other part types (input_audio, file, ...) carry no tokens in the simulator.
    return out


def render_chat(messages: Sequence[Mapping[str, Any]]) -> list[str | tuple[str, str]]:
    """The chat template as segments: text strings and ``("image", url)`` markers."""
    segments: list[str | tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages[{i}] must be an object with a role", param="messages")
        segments.append(f"<|{message['role']}|>\n")
        segments.extend(_content_segments(message.get("content"), i))
        segments.append("\n")
    segments.append("<|assistant|>\n")
    return segments


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last user message (text parts joined), for echo mode."""
    for message in reversed(messages):
        if message.get("role") == "user":
            parts = _content_segments(message.get("content"), 0)
            return "".join(p for p in parts if isinstance(p, str))
    return ""
