"""Red-team evaluation: block rate on attacks, false-positive rate on benign prompts.

Works against anything that answers "was this prompt blocked?": the gateway over HTTP (see
``fleetgate safety eval``) or a policy in-process::

    report = await evaluate(load_prompts(ATTACKS), load_prompts(BENIGN), blocked_by(policy))
    print(report.format())

The shipped sets (``safety/data/redteam.jsonl``, ``benign.jsonl``; one
``{"prompt", "category", "lang"}`` per line) hold prompts that are not in the classifier's
training examples.
"""

from __future__ import annotations

import asyncio
import json
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
    "EvalPrompt",
    "EvalReport",
    "Tally",
    "blocked_by",
    "evaluate",
    "load_prompts",
    "shipped_set",
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


def shipped_set(name: str) -> list[EvalPrompt]:
    """A shipped set: ``"redteam"`` or ``"benign"``."""
    text = resources.files("fleetgate.safety").joinpath(f"data/{name}.jsonl").read_text("utf-8")
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


@dataclass(slots=True)
class EvalReport:
    """``attack.rate`` is the block rate; ``benign.rate`` the false-positive rate."""

    attack: Tally = field(default_factory=Tally)
    benign: Tally = field(default_factory=Tally)
    attack_by: dict[tuple[str, str], Tally] = field(default_factory=dict)
    benign_by: dict[tuple[str, str], Tally] = field(default_factory=dict)
    missed: list[EvalPrompt] = field(default_factory=list)
    false_positives: list[EvalPrompt] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def rows(by: dict[tuple[str, str], Tally]) -> list[dict[str, Any]]:
            return [{"category": c, "lang": lang, "total": t.total, "blocked": t.blocked,
                     "errors": t.errors, "rate": round(t.rate, 4)}
                    for (c, lang), t in sorted(by.items())]  # fmt: skip

        return {
            "block_rate": round(self.attack.rate, 4),
            "false_positive_rate": round(self.benign.rate, 4),
            "attacks": {"total": self.attack.total, "blocked": self.attack.blocked,
                        "errors": self.attack.errors, "by": rows(self.attack_by)},
            "benign": {"total": self.benign.total, "blocked": self.benign.blocked,
                       "errors": self.benign.errors, "by": rows(self.benign_by)},
        }  # fmt: skip

    def format(self) -> str:
        """A plain-text table for the terminal."""
        lines = [
            f"attacks blocked: {self.attack.blocked}/{self.attack.total - self.attack.errors}"
            f" = {self.attack.rate:.1%}   (errors: {self.attack.errors})",
            f"benign blocked (false positives): {self.benign.blocked}/"
            f"{self.benign.total - self.benign.errors} = {self.benign.rate:.1%}"
            f"   (errors: {self.benign.errors})",
            "",
            f"{'set':8} {'category':18} {'lang':5} {'blocked':>9} {'rate':>7}",
        ]
        for name, by in (("attack", self.attack_by), ("benign", self.benign_by)):
            for (cat, lang), t in sorted(by.items()):
                lines.append(
                    f"{name:8} {cat:18} {lang:5} {t.blocked:>4}/{t.total:<4} {t.rate:>7.1%}"
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
    sem = asyncio.Semaphore(concurrency)

    async def one(p: EvalPrompt, attack: bool) -> None:
        total = report.attack if attack else report.benign
        by = report.attack_by if attack else report.benign_by
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
        if blocked:
            total.blocked += 1
            cell.blocked += 1
            if not attack:
                report.false_positives.append(p)
        elif attack:
            report.missed.append(p)

    await asyncio.gather(*(one(p, True) for p in attacks), *(one(p, False) for p in benign))
    return report


def blocked_by(policy: Policy, stage: CheckPoint = CheckPoint.INPUT) -> IsBlocked:
    """An ``is_blocked`` that runs a policy's checks in-process."""

    async def is_blocked(prompt: str) -> bool:
        decision = await policy.run(stage, prompt, CheckContext(stage=stage))
        return decision.blocked

    return is_blocked
