"""Cut streamed text into short phrases for speech synthesis.

Phrases of about ``min_chars``-``max_chars`` characters end at punctuation (Chinese and Japanese
full-width punctuation included). Without punctuation in reach, a phrase ends at a space, and
only text with no spaces at all (CJK, or an endless token) is cut inside a run of characters.
A ``.`` followed by a non-space (``3.14``, ``e.g.x``) is not a cut.
"""

from __future__ import annotations

__all__ = ["PhraseChunker"]

_ASCII_PUNCT = frozenset(".,!?;:")
_WIDE_PUNCT = frozenset("，。！？；：、…")
_CLOSERS = frozenset("\"')]}”’」』）】")


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return 0x3000 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF


class PhraseChunker:
    """Accumulates text deltas and emits phrases.

    Example::

        chunker = PhraseChunker()
        for delta in ["Hello the", "re, how are", " you today? Fine."]:
            for phrase in chunker.feed(delta):
                speak(phrase)
        for phrase in chunker.flush():
            speak(phrase)
    """

    def __init__(self, *, min_chars: int = 10, max_chars: int = 20, hard_max_chars: int = 60):
        if not 0 < min_chars <= max_chars <= hard_max_chars:
            raise ValueError("need 0 < min_chars <= max_chars <= hard_max_chars")
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.hard_max_chars = hard_max_chars
        self._buf = ""

    def feed(self, delta: str) -> list[str]:
        """Add ``delta``; return the phrases that are complete now."""
        self._buf += delta
        return self._drain(final=False)

    def flush(self) -> list[str]:
        """End of text: return every remaining phrase."""
        phrases = self._drain(final=True)
        rest = self._buf.strip()
        self._buf = ""
        if rest:
            phrases.append(rest)
        return phrases

    def _drain(self, *, final: bool) -> list[str]:
        out: list[str] = []
        while True:
            self._buf = self._buf.lstrip()
            cut = self._find_cut(self._buf, final)
            if cut is None:
                return out
            phrase, self._buf = self._buf[:cut].strip(), self._buf[cut:]
            if phrase:
                out.append(phrase)

    def _punct_cuts(self, text: str, final: bool) -> list[int]:
        cuts: list[int] = []
        for i, ch in enumerate(text):
            end = i + 1
            if ch in _WIDE_PUNCT or ch == "\n":
                pass
            elif ch in _ASCII_PUNCT:
                while end < len(text) and text[end] in _CLOSERS:
                    end += 1
                if end == len(text):
                    if not final:
                        continue  # might be "3." of "3.14": wait for the next character
                elif not text[end].isspace():
                    continue
            else:
                continue
            while end < len(text) and text[end] in _CLOSERS:
                end += 1
            cuts.append(end)
        return cuts

    def _find_cut(self, text: str, final: bool) -> int | None:
        cuts = self._punct_cuts(text, final)
        for cut in cuts:
            if self.min_chars <= cut <= self.max_chars:
                return cut
        if len(text) <= self.max_chars:
            return None
        # Slightly long but ending at punctuation beats a short fragment or a cut at a space.
        slack = self.max_chars + self.max_chars // 2
        late = [c for c in cuts if self.max_chars < c <= slack]
        if late:
            return late[0]
        if len(text) <= slack and not final:
            return None
        return self._fallback_cut(text, cuts)

    def _fallback_cut(self, text: str, cuts: list[int]) -> int | None:
        # No punctuation in reach: the last one before max_chars, else a space, else a CJK
        # boundary, else the end of an over-long word.
        early = [c for c in cuts if c <= self.max_chars]
        if early:
            return early[-1]
        space = text.rfind(" ", 0, self.max_chars + 1)
        if space > 0:
            return space
        if _is_cjk(text[self.max_chars - 1]) or _is_cjk(text[self.max_chars]):
            return self.max_chars
        later = text.find(" ", self.max_chars)
        if later > 0:
            return later
        return self.hard_max_chars if len(text) > self.hard_max_chars else None
