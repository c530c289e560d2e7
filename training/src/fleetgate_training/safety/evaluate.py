"""Red-team evaluation: block rate on attacks, false-positive rate on benign prompts.

Works against anything that answers "was this prompt blocked?": the gateway over HTTP (see
``fleetgate safety eval``) or a policy in-process::

    report = await evaluate(load_prompts(ATTACKS), load_prompts(BENIGN), blocked_by(policy))
    print(report.format())

The shipped sets (``fleetgate_training/data/redteam.jsonl``, ``benign.jsonl``; one
``{"prompt", "category", "lang"}`` per line) hold prompts that are not in the classifier's
training examples. Any other set, JSONL or CSV with a label column, loads with `load_labeled`;
every rate comes with its 95% Wilson interval, the outcome is split by language as a confusion
table, and two runs over the same set compare with `fleetgate_training.safety.compare.compare`
(an exact McNemar test on the prompts where they disagree).
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgate.errors import ConfigError
from fleetgate.safety.base import CheckContext, CheckPoint

if TYPE_CHECKING:
    from fleetgate.safety.policy import Policy

__all__ = [
    "SAFE_LABELS",
    "UNSAFE_LABELS",
    "EvalPrompt",
    "EvalReport",
    "IsBlocked",
    "Tally",
    "blocked_by",
    "detect_lang",
    "evaluate",
    "load_labeled",
    "load_prompts",
    "shipped_set",
    "wilson",
]

IsBlocked = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class EvalPrompt:
    prompt: str
    category: str
    lang: str


def _parse(lines: Sequence[str], source: str) -> list[EvalPrompt]:
    out: list[EvalPrompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(EvalPrompt(str(row["prompt"]), str(row.get("category", "unknown")),
                                  str(row.get("lang", "unknown"))))  # fmt: skip
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(
                f'{source}:{n}: expected {{"prompt", "category", "lang"}}: {exc}'
            ) from exc
    return out


def load_prompts(path: str | Path) -> list[EvalPrompt]:
    """Prompts from a JSONL file."""
    p = Path(path)
    return _parse(p.read_text("utf-8").splitlines(), str(p))


UNSAFE_LABELS = ("unsafe", "harmful", "1", "true", "yes", "attack", "malicious", "jailbreak")
SAFE_LABELS = ("safe", "unharmful", "benign", "0", "false", "no")

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")


def detect_lang(text: str) -> str:
    """A rough language of ``text`` for sets without a language column: ``ja`` (kana), ``ko``
    (hangul), ``zh`` (Han characters), else ``en``."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    return "zh" if _HAN.search(text) else "en"


def load_labeled(
    path: str | Path,
    *,
    text: str = "prompt",
    label: str = "label",
    category: str | None = "category",
    lang: str | None = "lang",
    unsafe: Sequence[str] = UNSAFE_LABELS,
    safe: Sequence[str] = SAFE_LABELS,
) -> tuple[list[EvalPrompt], list[EvalPrompt]]:
    """``(attacks, benign)`` from a JSONL or CSV file (by its suffix) with one prompt per row.

    ``text`` and ``label`` name the columns that must be there; a label is unsafe when it is one
    of ``unsafe`` and safe when it is one of ``safe`` (case-insensitive; anything else is an
    error naming the row). ``category`` and ``lang`` are optional columns: without a category
    the label is the category; without a language one is guessed (`detect_lang`)."""
    p = Path(path)
    unsafe_set = {v.strip().lower() for v in unsafe}
    safe_set = {v.strip().lower() for v in safe}
    if unsafe_set & safe_set:
        raise ConfigError(f"labels both unsafe and safe: {sorted(unsafe_set & safe_set)}")
    try:
        raw = p.read_text("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from exc
    rows: list[tuple[int, Any]] = []
    if p.suffix.lower() == ".csv":
        reader = csv.DictReader(raw.splitlines())
        missing = {text, label} - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"{p}: no column {', '.join(sorted(missing))} in the header")
        rows = [(n, row) for n, row in enumerate(reader, 2)]
    else:
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{p}:{n}: not JSON: {exc}") from exc
    attacks: list[EvalPrompt] = []
    benign: list[EvalPrompt] = []
    for n, row in rows:
        if not isinstance(row, dict) or not isinstance(row.get(text), str) or label not in row:
            raise ConfigError(f"{p}:{n}: expected a {text!r} string and a {label!r} value")
        value = str(row[label]).strip().lower()
        if value not in unsafe_set and value not in safe_set:
            raise ConfigError(
                f"{p}:{n}: label {row[label]!r} is neither unsafe ({', '.join(sorted(unsafe_set))})"
                f" nor safe ({', '.join(sorted(safe_set))})"
            )
        prompt = row[text]
        cat = str(row.get(category) or value) if category else value
        language = str(row.get(lang) or "") if lang else ""
        item = EvalPrompt(prompt, cat, language or detect_lang(prompt))
        (attacks if value in unsafe_set else benign).append(item)
    return attacks, benign


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials (95% by default)."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def shipped_set(name: str) -> list[EvalPrompt]:
    """A shipped set: ``"redteam"`` or ``"benign"``."""
    text = resources.files("fleetgate_training").joinpath(f"data/{name}.jsonl").read_text("utf-8")
    return _parse(text.splitlines(), f"{name}.jsonl")


@dataclass(slots=True)
class Tally:
    total: int = 0
    blocked: int = 0
    errors: int = 0

    @property
    def rate(self) -> float:
        """Blocked share of the prompts that got an answer."""
        answered = self.total - self.errors
        return self.blocked / answered if answered else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        """The rate's 95% Wilson interval."""
        return wilson(self.blocked, self.total - self.errors)


@dataclass(slots=True)
class EvalReport:
    """``attack.rate`` is the block rate; ``benign.rate`` the false-positive rate."""

    attack: Tally = field(default_factory=Tally)
    benign: Tally = field(default_factory=Tally)
    attack_by: dict[tuple[str, str], Tally] = field(default_factory=dict)
    benign_by: dict[tuple[str, str], Tally] = field(default_factory=dict)
    missed: list[EvalPrompt] = field(default_factory=list)
    false_positives: list[EvalPrompt] = field(default_factory=list)
    # per prompt, in input order (attacks then benign): blocked, or None for an error
    attack_outcomes: list[bool | None] = field(default_factory=list)
    benign_outcomes: list[bool | None] = field(default_factory=list)

    def confusion_by_lang(self) -> dict[str, dict[str, int]]:
        """Per language: attacks blocked (``tp``) and passed (``fn``), benign prompts blocked
        (``fp``) and passed (``tn``), and errors."""
        out: dict[str, dict[str, int]] = {}
        for attack, by in ((True, self.attack_by), (False, self.benign_by)):
            for (_, lang), t in by.items():
                cell = out.setdefault(lang, {"tp": 0, "fn": 0, "fp": 0, "tn": 0, "errors": 0})
                passed = t.total - t.errors - t.blocked
                cell["tp" if attack else "fp"] += t.blocked
                cell["fn" if attack else "tn"] += passed
                cell["errors"] += t.errors
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        def ci(t: Tally) -> list[float]:
            return [round(v, 4) for v in t.ci95]

        def rows(by: dict[tuple[str, str], Tally]) -> list[dict[str, Any]]:
            return [{"category": c, "lang": lang, "total": t.total, "blocked": t.blocked,
                     "errors": t.errors, "rate": round(t.rate, 4), "ci95": ci(t)}
                    for (c, lang), t in sorted(by.items())]  # fmt: skip

        return {
            "block_rate": round(self.attack.rate, 4),
            "block_rate_ci95": ci(self.attack),
            "false_positive_rate": round(self.benign.rate, 4),
            "false_positive_rate_ci95": ci(self.benign),
            "confusion_by_lang": self.confusion_by_lang(),
            "attacks": {"total": self.attack.total, "blocked": self.attack.blocked,
                        "errors": self.attack.errors, "by": rows(self.attack_by)},
            "benign": {"total": self.benign.total, "blocked": self.benign.blocked,
                       "errors": self.benign.errors, "by": rows(self.benign_by)},
        }  # fmt: skip

    def format(self) -> str:
        """A plain-text table for the terminal."""

        def ci(t: Tally) -> str:
            lo, hi = t.ci95
            return f"[{lo:.1%}, {hi:.1%}]"

        lines = [
            f"attacks blocked: {self.attack.blocked}/{self.attack.total - self.attack.errors}"
            f" = {self.attack.rate:.1%} {ci(self.attack)}   (errors: {self.attack.errors})",
            f"benign blocked (false positives): {self.benign.blocked}/"
            f"{self.benign.total - self.benign.errors} = {self.benign.rate:.1%}"
            f" {ci(self.benign)}   (errors: {self.benign.errors})",
            "",
            f"{'set':8} {'category':18} {'lang':5} {'blocked':>9} {'rate':>7}  95% interval",
        ]
        for name, by in (("attack", self.attack_by), ("benign", self.benign_by)):
            for (cat, lang), t in sorted(by.items()):
                lines.append(
                    f"{name:8} {cat:18} {lang:5} {t.blocked:>4}/{t.total:<4} {t.rate:>7.1%}"
                    f"  {ci(t)}"
                )
        lines += ["", f"{'lang':5} {'tp':>6} {'fn':>6} {'fp':>6} {'tn':>6} {'errors':>7}"]
        for lang, c in self.confusion_by_lang().items():
            lines.append(
                f"{lang:5} {c['tp']:>6} {c['fn']:>6} {c['fp']:>6} {c['tn']:>6} {c['errors']:>7}"
            )
        return "\n".join(lines)


async def evaluate(
    attacks: Sequence[EvalPrompt],
    benign: Sequence[EvalPrompt],
    is_blocked: IsBlocked,
    *,
    concurrency: int = 8,
) -> EvalReport:
    """Send every prompt through ``is_blocked``; an exception counts as an error, not a block."""
    report = EvalReport()
    report.attack_outcomes = [None] * len(attacks)
    report.benign_outcomes = [None] * len(benign)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int, p: EvalPrompt, attack: bool) -> None:
        total = report.attack if attack else report.benign
        by = report.attack_by if attack else report.benign_by
        outcomes = report.attack_outcomes if attack else report.benign_outcomes
        cell = by.setdefault((p.category, p.lang), Tally())
        total.total += 1
        cell.total += 1
        async with sem:
            try:
                blocked = await is_blocked(p.prompt)
            except Exception:
                total.errors += 1
                cell.errors += 1
                return
        outcomes[i] = blocked
        if blocked:
            total.blocked += 1
            cell.blocked += 1
            if not attack:
                report.false_positives.append(p)
        elif attack:
            report.missed.append(p)

    await asyncio.gather(
        *(one(i, p, True) for i, p in enumerate(attacks)),
        *(one(i, p, False) for i, p in enumerate(benign)),
    )
    return report


def blocked_by(policy: Policy, stage: CheckPoint = CheckPoint.INPUT) -> IsBlocked:
    """An ``is_blocked`` that runs a policy's checks in-process."""

    async def is_blocked(prompt: str) -> bool:
        decision = await policy.run(stage, prompt, CheckContext(stage=stage))
        return decision.blocked

    return is_blocked
