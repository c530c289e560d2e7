"""Text normalisation against simple evasions, shared by the word-list check.

``normalize(text)`` folds width (NFKC), case, look-alike characters (Cyrillic and Greek letters
that look Latin, ``0->o 1->i 3->e 4->a 5->s 7->t @->a $->s``) and removes separators inserted
between single characters (``k i l l``, ``k.i.l.l``, ``炸 弹``), so ``Ｋ1ＬＬ`` and ``к-і-l-l``
both read ``kill``. Word boundaries between real words are kept, so "skill" never reads "kill".
Chinese in Traditional characters is folded to Simplified, one character at a time (``殺人`` and
``点樣`` read ``杀人`` and ``点样``), by a table built from OpenCC's dictionaries (Apache-2.0;
``bench/safety/build_t2s.py`` writes ``safety/data/t2s.json``). A character that is also written
in Simplified text (乾, 著) is left as it is, so Simplified text never changes (issue #38).

The translation table is built once per :class:`Normalizer`; normalising a 1 KB window costs a
few microseconds.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping
from importlib import resources

__all__ = [
    "HOMOGLYPHS",
    "LEET",
    "Normalizer",
    "is_cjk",
    "to_simplified",
    "traditional_to_simplified",
]

# Letters from other scripts that render like Latin ones (lower case; NFKC + casefold first).
HOMOGLYPHS: Mapping[str, str] = {
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d",
    "ɡ": "g", "һ": "h", "ӏ": "l", "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k", "ν": "v",
    "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ı": "i", "ł": "l", "ø": "o", "ß": "ss",
}  # fmt: skip

# Digits and symbols used as letters.
LEET: Mapping[str, str] = {
    "0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "9": "g",
    "@": "a", "$": "s", "!": "i", "|": "l", "+": "t", "€": "e",
}  # fmt: skip

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_SEP = r"[\s\W_]"
# A run of >= 3 single letters/digits each separated by separators: "k i l l", "b.o.m.b".
_SPACED = re.compile(rf"(?<![^\W_])(?:[^\W_]{_SEP}+){{2,}}[^\W_](?![^\W_])")
_SEP_RUN = re.compile(rf"{_SEP}+")
# Separators between two CJK characters: "炸 弹", "炸*弹", "炸_弹".
_CJK_GAP = re.compile(rf"(?<=[{_CJK}]){_SEP}+(?=[{_CJK}])")
_WS = re.compile(r"\s+")
_CJK_CHAR = re.compile(rf"[{_CJK}]")


def is_cjk(text: str) -> bool:
    """True when ``text`` contains at least one CJK ideograph."""
    return _CJK_CHAR.search(text) is not None


@functools.cache
def traditional_to_simplified() -> Mapping[str, str]:
    """Traditional character -> Simplified character (about 3,200 pairs), read once from the
    package's ``safety/data/t2s.json``."""
    raw = resources.files("fleetgate.safety").joinpath("data/t2s.json").read_text("utf-8")
    doc = json.loads(raw)
    return dict(zip(doc["traditional"], doc["simplified"], strict=True))


@functools.cache
def _t2s_table() -> dict[int, str]:
    return str.maketrans(dict(traditional_to_simplified()))


def to_simplified(text: str) -> str:
    """``text`` with Traditional Chinese characters written in Simplified; anything else kept."""
    if _CJK_CHAR.search(text) is None:
        return text
    return text.translate(_t2s_table())


def _join_spaced(match: re.Match[str]) -> str:
    return _SEP_RUN.sub("", match.group(0))


class Normalizer:
    """Folds text to the form word patterns are matched against.

    Example::

        >>> Normalizer().normalize("Ｉｇｎ0ｒｅ  a.l.l   previous")
        'ignore all previous'
    """

    def __init__(
        self, extra: Mapping[str, str] | None = None, *, leet: bool = True, simplify: bool = True
    ) -> None:
        table: dict[str, str] = dict(traditional_to_simplified()) if simplify else {}
        table.update(HOMOGLYPHS)
        if leet:
            table.update(LEET)
        if extra:
            table.update(extra)
        self._table = str.maketrans(table)

    def normalize(self, text: str) -> str:
        """Width, case, look-alikes (and Traditional -> Simplified), then join spaced-out letters
        and collapse whitespace."""
        folded = unicodedata.normalize("NFKC", text).casefold().translate(self._table)
        folded = _SPACED.sub(_join_spaced, folded)
        if _CJK_CHAR.search(folded) is not None:
            folded = _CJK_GAP.sub("", folded)
        return _WS.sub(" ", folded).strip()
