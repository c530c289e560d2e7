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
from fleetgate.safety.base import CheckContext, CheckPoint, Verdict
from fleetgate.safety.decode import hidden_texts
from fleetgate.safety.normalize import Normalizer, is_cjk
from fleetgate.safety.offload import TextWorker

__all__ = ["WordListCheck", "default_reply_word_lists", "default_word_lists"]

_WORD = "a-z0-9"


def _shipped() -> dict[str, object]:
    text = resources.files("fleetgate.safety").joinpath("data/wordlists.json").read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


def default_word_lists() -> dict[str, list[str]]:
    """The lists that ship with fleetgate (``safety/data/wordlists.json``), by category."""
    data = _shipped()
    return {k: [str(x) for x in v] for k, v in data.items() if not k.startswith("_")
            and isinstance(v, list)}  # fmt: skip


def default_reply_word_lists() -> dict[str, list[str]]:
    """The shipped phrases that count only in replies: topic nouns (盗刷, "child sexual abuse
    material") that a user's question about prevention or reporting contains, but a reply
    naming them is a strong signal."""
    reply = _shipped().get("_reply_only")
    if not isinstance(reply, dict):
        return {}
    return {str(k): [str(x) for x in v] for k, v in reply.items()}


def _latin_piece(phrase: str, wildcard: bool) -> str:
    body = r"\s?".join(re.escape(w) for w in phrase.split(" "))
    tail = f"[{_WORD}]*" if wildcard else ""
    return f"{body}{tail}(?![{_WORD}])"


class WordListCheck:
    """Blocks text containing any listed word or pattern; categories name the lists hit.

    ``reply_lists``: more lists that count only outside the input stage (stream and output
    checks of a reply, audit), e.g. `default_reply_word_lists`.

    Plain CJK phrases are found by substring search, Latin phrases by one regex anchored at word
    starts, ``re:`` entries by their own regexes, so a 1 KB window costs well under a millisecond.
    A long text is scanned in ``worker`` (`TextWorker`: a process, off the event loop); without
    one the check makes its own and stops it in `close`.
    """

    def __init__(
        self,
        lists: Mapping[str, Sequence[str]],
        *,
        name: str = "words",
        normalizer: Normalizer | None = None,
        reply_lists: Mapping[str, Sequence[str]] | None = None,
        worker: TextWorker | None = None,
    ) -> None:
        self.name = name
        self._own_worker = worker is None
        self._worker: TextWorker | None = worker or TextWorker()
        self._normalizer = normalizer or Normalizer()
        self._reply = (
            WordListCheck(reply_lists, name=name, normalizer=self._normalizer, worker=self._worker)
            if reply_lists
            else None
        )
        self._cjk: list[tuple[str, str]] = []
        self._patterns: list[tuple[re.Pattern[str], str]] = []
        groups: list[str] = []
        self._group_category: dict[str, str] = {}
        try:
            for i, (category, entries) in enumerate(lists.items()):
                latin: list[str] = []
                for entry in (e for e in entries if e.strip()):
                    if entry.startswith("re:"):
                        self._patterns.append((re.compile(entry[3:]), category))
                        continue
                    phrase = self._normalizer.normalize(entry.rstrip("*"))
                    if not phrase:
                        raise ConfigError(f"safety word list {name!r}: empty entry {entry!r}")
                    if is_cjk(phrase):
                        self._cjk.append((phrase.replace(" ", ""), category))
                    else:
                        latin.append(_latin_piece(phrase, entry.endswith("*")))
                if latin:
                    self._group_category[f"c{i}"] = category
                    groups.append(f"(?P<c{i}>{'|'.join(latin)})")
            alternation = "|".join(groups)
            self._latin = re.compile(f"(?<![{_WORD}])(?:{alternation})") if groups else None
        except re.error as exc:
            raise ConfigError(f"safety word list {name!r}: bad pattern: {exc}") from exc

    def scan(self, text: str) -> tuple[list[str], list[str]]:
        """Categories hit and the (normalised) terms that hit them, in ``text`` and in any text
        hidden in it by base64 or hex (`decode.hidden_texts`); synchronous and cheap."""
        hits: list[tuple[str, str]] = []
        for view in (text, *hidden_texts(text)):
            hits.extend(self._hits(self._normalizer.normalize(view)))
        categories: list[str] = []
        for category, _ in hits:
            if category not in categories:
                categories.append(category)
        return categories, [term for _, term in hits]

    def _hits(self, norm: str) -> list[tuple[str, str]]:
        hits: list[tuple[str, str]] = []
        if self._latin is not None:
            for m in self._latin.finditer(norm):
                if m.lastgroup is not None:
                    hits.append((self._group_category[m.lastgroup], m.group(0)))
        for pattern, category in self._patterns:
            found = pattern.search(norm)
            if found is not None:
                hits.append((category, found.group(0)))
        for phrase, category in self._cjk:
            if phrase in norm:
                hits.append((category, phrase))
        return hits

    def judge(self, text: str, replies: bool) -> tuple[list[str], list[str]]:
        """`scan`, with the reply-only lists too when ``replies``."""
        categories, terms = self.scan(text)
        if self._reply is not None and replies:
            more, more_terms = self._reply.scan(text)
            categories += [c for c in more if c not in categories]
            terms += more_terms
        return categories, terms

    def __getstate__(self) -> dict[str, object]:
        # what the worker process gets: the lists, not the worker
        return {**self.__dict__, "_worker": None, "_own_worker": False}

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        replies = ctx.stage is not CheckPoint.INPUT
        if self._worker is None:  # an unpickled copy (in the worker process)
            categories, terms = self.judge(text, replies)
        else:
            categories, terms = await self._worker.run(self.judge, text, replies, size=len(text))
        if not categories:
            return Verdict.allow(self.name)
        return Verdict.block(self.name, categories, detail="matched: " + ", ".join(terms[:5]))

    def close(self) -> None:
        """Stop the worker process if this check made its own."""
        if self._own_worker and self._worker is not None:
            self._worker.close()
