"""Word and pattern lists, any language, matched after evasion-folding normalisation.

A list entry is one of:

- a phrase, ``"ignore previous instructions"``: matched on word boundaries in Latin script
  (``*`` at the end allows any word ending: ``"bomb*"``); in CJK text as a plain substring;
- a regular expression prefixed ``re:``, applied to the normalised text.

Example::

    check = WordListCheck({"weapons": ["pipe bomb*", "制作炸弹"]})
    await check.check("how to build a p1pe b.o.m.b", CheckContext())   # -> block, weapons
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources

from fleetgate.errors import ConfigError
from fleetgate.safety.base import CheckContext, Verdict
from fleetgate.safety.normalize import Normalizer, is_cjk

__all__ = ["WordListCheck", "default_word_lists"]

_WORD = "a-z0-9"


def default_word_lists() -> dict[str, list[str]]:
    """The lists that ship with fleetgate (``safety/data/wordlists.json``), by category."""
    text = resources.files("fleetgate.safety").joinpath("data/wordlists.json").read_text("utf-8")
    data = json.loads(text)
    return {str(k): [str(x) for x in v] for k, v in data.items() if not k.startswith("_")}


def _piece(entry: str, normalizer: Normalizer) -> str:
    if entry.startswith("re:"):
        return f"(?:{entry[3:]})"
    wildcard = entry.endswith("*")
    phrase = normalizer.normalize(entry.rstrip("*"))
    if not phrase:
        raise ConfigError(f"safety word list: empty entry {entry!r}")
    if is_cjk(phrase):
        return re.escape(phrase.replace(" ", ""))
    body = r"\s?".join(re.escape(w) for w in phrase.split(" "))
    tail = f"[{_WORD}]*" if wildcard else ""
    return f"(?<![{_WORD}]){body}{tail}(?![{_WORD}])"


class WordListCheck:
    """Blocks text containing any listed word or pattern; categories name the lists hit."""

    def __init__(
        self,
        lists: Mapping[str, Sequence[str]],
        *,
        name: str = "words",
        normalizer: Normalizer | None = None,
    ) -> None:
        self.name = name
        self._normalizer = normalizer or Normalizer()
        groups: list[str] = []
        self._group_category: dict[str, str] = {}
        for i, (category, entries) in enumerate(lists.items()):
            pieces = [_piece(e, self._normalizer) for e in entries if e.strip()]
            if not pieces:
                continue
            group = f"c{i}"
            self._group_category[group] = category
            groups.append(f"(?P<{group}>{'|'.join(pieces)})")
        try:
            self._regex = re.compile("|".join(groups)) if groups else None
        except re.error as exc:
            raise ConfigError(f"safety word list {name!r}: bad pattern: {exc}") from exc

    def scan(self, text: str) -> tuple[list[str], list[str]]:
        """Categories hit and the (normalised) terms that hit them; synchronous and cheap."""
        if self._regex is None:
            return [], []
        categories: list[str] = []
        terms: list[str] = []
        for m in self._regex.finditer(self._normalizer.normalize(text)):
            group = m.lastgroup
            if group is None:
                continue
            category = self._group_category[group]
            if category not in categories:
                categories.append(category)
            terms.append(m.group(0))
        return categories, terms

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        categories, terms = self.scan(text)
        if not categories:
            return Verdict.allow(self.name)
        return Verdict.block(self.name, categories, detail="matched: " + ", ".join(terms[:5]))
