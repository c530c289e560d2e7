"""``fleetgate safety scan``: review a training corpus before it is used.

Reads a JSONL or CSV corpus line by line (one unreadable line is reported and skipped, never
fatal), then:

1. **exact duplicates**: the same text after normalising (Unicode NFKC, case folded,
   whitespace collapsed) as an earlier line;
2. **near duplicates**: MinHash signatures (64 hashes of the normalised text's character
   5-grams, 3-grams for Chinese) bucketed by locality-sensitive hashing (16 bands of 4 rows:
   a pair at similarity 0.8 shares a bucket with probability 0.9998), a candidate confirmed
   when the exact Jaccard similarity of the two lines' shingles is at least ``near`` (0.8 by
   default: one changed word in a line of about a hundred characters);
3. **the gateway's input checks** on what is left, in batch: the policy of the config's
   ``safety`` section (or the built-in default: words, PII masking, the classifier), exactly as
   requests are checked;

and writes the cleaned corpus (duplicates and blocked lines dropped, masked text written in
place of the original; a chat line that needs masking is dropped, its messages' masked join
cannot be split back) and a report by category with examples.

Example::

    fleetgate safety scan corpus.jsonl --output clean.jsonl --report report.json
    fleetgate safety scan chats.csv --text-column prompt --policy strict --config fleetgate.yaml
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import hashlib
import json
import re
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fleetgate.errors import ConfigError

__all__ = [
    "Line", "MinHashIndex", "ScanReport", "add_parser", "read_corpus", "run_scan", "scan",
    "text_of",
]  # fmt: skip

_PERMS = 64
_BANDS = 16
_ROWS = _PERMS // _BANDS
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_BUCKET = 8  # lines kept per LSH bucket (templated corpora fill some buckets)
_MAX_CANDIDATES = 32  # earlier lines compared exactly per new line, at most
_TEXT_FIELDS = ("text", "prompt", "content", "input", "instruction")
_EXAMPLE_CHARS = 200


@dataclass
class Line:
    number: int  # 1-based line of the file (CSV: its row, the header being 1)
    text: str
    record: dict[str, Any]  # the parsed line, written back (masked) when kept
    field: str | None  # where the text came from (None: chat messages)


def text_of(record: dict[str, Any], field: str | None) -> tuple[str, str | None]:
    """(the text to check, the field it is in; None for chat ``messages``)."""
    if field is not None:
        value = record.get(field)
        if not isinstance(value, str):
            raise ValueError(f"no text field {field!r}")
        return value, field
    for name in _TEXT_FIELDS:
        if isinstance(record.get(name), str):
            return record[name], name
    messages = record.get("messages")
    if isinstance(messages, list):
        parts = [m.get("content") for m in messages if isinstance(m, dict)]
        return "\n".join(p for p in parts if isinstance(p, str)), None
    raise ValueError(f"no text: none of {', '.join(_TEXT_FIELDS)} or messages")


def read_corpus(path: Path, field: str | None, errors: list[str]) -> Iterator[Line]:
    """The corpus's lines; each unreadable one is described in ``errors`` and skipped."""
    if path.suffix.lower() in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8-sig") as f:
            rows = csv.DictReader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
            for n, row in enumerate(rows, start=2):
                try:
                    text, where = text_of(dict(row), field)
                except ValueError as exc:
                    errors.append(f"line {n}: {exc}")
                    continue
                yield Line(n, text, dict(row), where)
        return
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
                text, where = text_of(record, field)
            except (ValueError, UnicodeDecodeError) as exc:
                errors.append(f"line {n}: {str(exc)[:120]}")
                continue
            yield Line(n, text, record, where)


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _shingles(norm: str) -> set[str]:
    """Character n-grams: 5 characters, 3 for mostly Chinese text (robust on short lines,
    where one changed word is a large share of the word n-grams)."""
    size = 3 if len(_CJK.findall(norm)) * 3 > len(norm) else 5
    if len(norm) <= size:
        return {norm}
    return {norm[i : i + size] for i in range(len(norm) - size + 1)}


class MinHashIndex:
    """Near-duplicate detection: MinHash signatures bucketed by LSH bands."""

    def __init__(self, threshold: float = 0.8, seed: int = 2026) -> None:
        rng = np.random.default_rng(seed)
        self.threshold = threshold
        self._a = rng.integers(0, 1 << 63, _PERMS, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self._b = rng.integers(0, 1 << 63, _PERMS, dtype=np.uint64)
        self._buckets: dict[tuple[int, bytes], list[int]] = {}
        self._texts: list[str] = []  # the indexed (normalised) texts, by index

    def signature(self, norm: str) -> np.ndarray:
        hashes = np.fromiter(
            (int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "big")
             for s in _shingles(norm)),
            dtype=np.uint64,
        )  # fmt: skip
        # one multiply-add hash per permutation (odd multipliers, arithmetic modulo 2^64)
        mixed = self._a[:, None] * hashes[None, :] + self._b[:, None]
        return mixed.min(axis=1)  # type: ignore[no-any-return]

    def add(self, norm: str) -> int | None:
        """Index ``norm``; the index of an earlier near duplicate, or None (then it is kept).
        Candidates share an LSH bucket; each is confirmed on the exact Jaccard similarity of
        the two texts' shingles (the signature only finds them)."""
        shingles = _shingles(norm)
        sig = self.signature(norm)
        keys = [(band, sig[band * _ROWS : (band + 1) * _ROWS].tobytes()) for band in range(_BANDS)]
        seen: set[int] = set()
        for key in keys:
            for other in self._buckets.get(key, ()):
                if other in seen or len(seen) >= _MAX_CANDIDATES:
                    continue
                seen.add(other)
                theirs = _shingles(self._texts[other])
                if len(shingles & theirs) >= self.threshold * len(shingles | theirs):
                    return other
        index = len(self._texts)
        self._texts.append(norm)
        for key in keys:
            bucket = self._buckets.setdefault(key, [])
            if len(bucket) < _BUCKET:
                bucket.append(index)
        return None


@dataclass
class ScanReport:
    lines: int = 0
    unreadable: list[str] = field(default_factory=list)
    exact_duplicates: int = 0
    near_duplicates: int = 0
    blocked: Counter[str] = field(default_factory=Counter)  # by category
    masked: int = 0
    kept: int = 0
    seconds: float = 0.0
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    dropped_lines: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines, "unreadable": len(self.unreadable),
            "unreadable_lines": self.unreadable[:100],
            "exact_duplicates": self.exact_duplicates, "near_duplicates": self.near_duplicates,
            "blocked": sum(self.blocked.values()), "blocked_by_category": dict(self.blocked),
            "masked": self.masked, "kept": self.kept, "seconds": round(self.seconds, 2),
            "lines_per_s": round(self.lines / self.seconds, 1) if self.seconds else None,
            "examples": dict(self.examples),
            "dropped_lines": {k: v for k, v in self.dropped_lines.items()},
        }  # fmt: skip

    def _example(self, kind: str, line: Line, extra: dict[str, Any], most: int) -> None:
        self.dropped_lines[kind].append(line.number)
        if len(self.examples[kind]) < most:
            self.examples[kind].append({"line": line.number, "text": line.text[:_EXAMPLE_CHARS],
                                        **extra})  # fmt: skip


Decide = Callable[[str], Awaitable[tuple[str, list[str], str]]]
"""A text's (action: allow/mask/block, categories, masked text), from the input checks."""


async def scan(
    lines: Iterator[Line],
    decide: Decide,
    write: Callable[[Line], None],
    *,
    near: float = 0.8,
    examples: int = 5,
    concurrency: int = 32,
) -> ScanReport:
    """Deduplicate ``lines``, check what is left with ``decide``, ``write`` what is kept (in
    the corpus's order)."""
    report = ScanReport()
    started = time.perf_counter()
    exact: dict[bytes, int] = {}
    index = MinHashIndex(near)
    firsts: list[int] = []  # line number of each indexed line
    unique: list[Line] = []
    for line in lines:
        report.lines += 1
        norm = normalise(line.text)
        digest = hashlib.blake2b(norm.encode(), digest_size=16).digest()
        if digest in exact:
            report.exact_duplicates += 1
            report._example("exact_duplicate", line, {"of_line": exact[digest]}, examples)
            continue
        exact[digest] = line.number
        other = index.add(norm)
        if other is not None:
            report.near_duplicates += 1
            report._example("near_duplicate", line, {"of_line": firsts[other]}, examples)
            continue
        firsts.append(line.number)
        unique.append(line)
    for start in range(0, len(unique), concurrency * 8):
        chunk = unique[start : start + concurrency * 8]
        decided = await _bounded(decide, [line.text for line in chunk], concurrency)
        for line, (action, categories, masked) in zip(chunk, decided, strict=True):
            if action == "block":
                for category in categories or ["unspecified"]:
                    report.blocked[category] += 1
                report._example(f"blocked:{(categories or ['unspecified'])[0]}", line,
                                {"categories": categories}, examples)  # fmt: skip
                continue
            if action == "mask" and masked != line.text:
                report.masked += 1
                if line.field is None:  # chat messages: the masked join cannot be split back
                    report._example("masked_chat_dropped", line, {}, examples)
                    continue
                line.record[line.field] = line.text = masked
            report.kept += 1
            write(line)
    report.seconds = time.perf_counter() - started
    return report


async def _bounded(
    decide: Decide, texts: list[str], concurrency: int
) -> list[tuple[str, list[str], str]]:
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> tuple[str, list[str], str]:
        async with gate:
            return await decide(text)

    return list(await asyncio.gather(*(one(t) for t in texts)))


def add_parser(inner: Any) -> None:
    """Add ``scan`` to the ``safety`` command's sub-commands."""
    p = inner.add_parser("scan", help="deduplicate a training corpus and run the input checks",
                         description=__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("corpus", type=Path, help="JSONL (one object a line) or CSV/TSV")
    p.add_argument("--output", type=Path, required=True, help="the cleaned corpus (same format)")
    p.add_argument("--report", type=Path, help="the report as JSON (default: printed only)")
    fields = ", ".join(_TEXT_FIELDS)
    p.add_argument("--text-field",
                   help=f"field or column of the text (default: the first of {fields}, or chat "
                        "messages)")  # fmt: skip
    p.add_argument("--policy", default="default", help="a policy of the config's safety section")
    p.add_argument("--config", type=Path, help="gateway config (default: the built-in policies)")
    p.add_argument("--near", type=float, default=0.8, help="near-duplicate similarity (0.8)")
    p.add_argument("--examples", type=int, default=5, help="examples per category in the report")
    p.add_argument("--concurrency", type=int, default=32)
    p.set_defaults(func=run_scan)


def run_scan(args: argparse.Namespace) -> int:
    try:
        if not 0.3 <= args.near <= 1.0:
            raise ConfigError("--near is a similarity between 0.3 and 1")
        if not args.corpus.is_file():
            raise ConfigError(f"{args.corpus}: no such file")
        report = asyncio.run(_scan_file(args))
    except ConfigError as exc:
        print(f"fleetgate safety scan: {exc.message}", file=sys.stderr)
        return 2
    data = report.to_dict()
    if args.report:
        args.report.write_text(json.dumps(data, indent=2, ensure_ascii=False))
    print(f"{data['lines']} lines in {data['seconds']} s ({data['lines_per_s']} lines/s): "
          f"{data['exact_duplicates']} exact and {data['near_duplicates']} near duplicates, "
          f"{data['blocked']} blocked {data['blocked_by_category']}, {data['masked']} masked, "
          f"{data['unreadable']} unreadable; {data['kept']} written to {args.output}")  # fmt: skip
    return 0


async def _scan_file(args: argparse.Namespace) -> ScanReport:
    from fleetgate.config.loader import load_config
    from fleetgate.resources.outbound import OutboundHttp
    from fleetgate.safety.base import CheckContext, CheckPoint
    from fleetgate.safety.config import SAFETY_SECTION, SafetyConfig
    from fleetgate.safety.policy import Guardrails
    from fleetgate.safety.registry import builtin_registry

    loaded = load_config(args.config, sections=(SAFETY_SECTION,)) if args.config else None
    config = (SAFETY_SECTION.of(loaded) if loaded else None) or SafetyConfig()
    if args.policy not in config.policies:
        known = ", ".join(sorted(config.policies))
        raise ConfigError(f"no policy {args.policy} (known: {known})")
    http = OutboundHttp()
    guardrails = Guardrails(config, registry=builtin_registry(http=http))
    policy = guardrails.policy(args.policy)

    async def decide(text: str) -> tuple[str, list[str], str]:
        d = await policy.run(CheckPoint.INPUT, text, CheckContext(stage=CheckPoint.INPUT))
        return str(d.action), d.categories, d.text

    csv_out = args.corpus.suffix.lower() in (".csv", ".tsv")
    errors: list[str] = []
    try:
        await guardrails.warm_up()
        with args.output.open("w", newline="", encoding="utf-8") as out:
            writer = _writer(out, csv_out, args.corpus)
            report = await scan(read_corpus(args.corpus, args.text_field, errors), decide,
                                writer, near=args.near, examples=args.examples,
                                concurrency=args.concurrency)  # fmt: skip
    finally:
        await guardrails.aclose()
        await http.aclose()
    report.unreadable = errors
    return report


def _writer(out: Any, csv_out: bool, corpus: Path) -> Callable[[Line], None]:
    if not csv_out:
        return lambda line: out.write(json.dumps(line.record, ensure_ascii=False) + "\n")
    with corpus.open(newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(f, delimiter="\t" if corpus.suffix.lower() == ".tsv" else ","))
    rows = csv.DictWriter(out, fieldnames=header,
                          delimiter="\t" if corpus.suffix.lower() == ".tsv" else ",")  # fmt: skip
    rows.writeheader()
    return lambda line: rows.writerow(line.record)
