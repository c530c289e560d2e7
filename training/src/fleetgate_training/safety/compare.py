"""Two evaluation runs over the same prompts, paired: where only one of them blocked.

`compare` pairs two `EvalReport`s prompt by prompt (a prompt either run failed to answer is left
out) and gives the exact two-sided McNemar p-value of the split, for attacks and benign prompts
apart; `compare_by_lang` does the same within each language, so a gain in one language cannot
hide a loss in the other.

Example::

    a = await evaluate(attacks, benign, blocked_by(strict))
    b = await evaluate(attacks, benign, blocked_by(default))
    print(compare(a, b, ("strict", "default")).format())
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleetgate_training.safety.evaluate import EvalPrompt, EvalReport

__all__ = ["Comparison", "Paired", "compare", "compare_by_lang"]


@dataclass(frozen=True, slots=True)
class Paired:
    """Two runs over the same prompts of one kind: where only A or only B blocked."""

    only_a: int
    only_b: int
    both_answered: int

    @property
    def p_value(self) -> float:
        """Exact two-sided McNemar test: could the disagreements be a coin toss?"""
        n = self.only_a + self.only_b
        if n == 0:
            return 1.0
        k = min(self.only_a, self.only_b)
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
        return float(min(1.0, 2 * tail))


@dataclass(frozen=True, slots=True)
class Comparison:
    """A against B on the same set (`compare`)."""

    a: str
    b: str
    attacks: Paired
    benign: Paired

    def to_dict(self) -> dict[str, Any]:
        def side(p: Paired) -> dict[str, Any]:
            return {"only_a_blocked": p.only_a, "only_b_blocked": p.only_b,
                    "both_answered": p.both_answered, "p_value": round(p.p_value, 6)}  # fmt: skip

        return {"a": self.a, "b": self.b, "attacks": side(self.attacks),
                "benign": side(self.benign)}  # fmt: skip

    def format(self) -> str:
        return "\n".join([
            f"A = {self.a}, B = {self.b}",
            f"attacks blocked by A only: {self.attacks.only_a}, by B only: "
            f"{self.attacks.only_b}  (McNemar p = {self.attacks.p_value:.4g})",
            f"benign blocked by A only: {self.benign.only_a}, by B only: "
            f"{self.benign.only_b}  (McNemar p = {self.benign.p_value:.4g})",
        ])  # fmt: skip

    def line(self) -> str:
        """The comparison on one line (`compare_by_lang`'s, one per language)."""
        return (
            f"attacks blocked by A only {self.attacks.only_a}, by B only {self.attacks.only_b} "
            f"(p = {self.attacks.p_value:.4g}); benign blocked by A only {self.benign.only_a}, "
            f"by B only {self.benign.only_b} (p = {self.benign.p_value:.4g})"
        )


def _paired(a: Sequence[bool | None], b: Sequence[bool | None]) -> Paired:
    if len(a) != len(b):
        raise ValueError("compare runs over the same prompts")
    both = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    return Paired(
        sum(1 for x, y in both if x and not y), sum(1 for x, y in both if y and not x), len(both)
    )


def compare(a: EvalReport, b: EvalReport, names: tuple[str, str] = ("A", "B")) -> Comparison:
    """Pair two reports of the same set prompt by prompt (errors on either side left out)."""
    return Comparison(
        names[0],
        names[1],
        _paired(a.attack_outcomes, b.attack_outcomes),
        _paired(a.benign_outcomes, b.benign_outcomes),
    )


def compare_by_lang(
    a: EvalReport,
    b: EvalReport,
    attacks: Sequence[EvalPrompt],
    benign: Sequence[EvalPrompt],
    names: tuple[str, str] = ("A", "B"),
) -> dict[str, Comparison]:
    """`compare` within each language of the prompts both reports ran (``attacks`` and
    ``benign``, in the order `evaluate` got them), sorted by language."""
    if len(a.attack_outcomes) != len(attacks) or len(a.benign_outcomes) != len(benign):
        raise ValueError("compare_by_lang needs the prompts the reports ran, in order")

    def pick(outcomes: Sequence[bool | None], prompts: Sequence[EvalPrompt], lang: str
             ) -> list[bool | None]:  # fmt: skip
        return [o for o, p in zip(outcomes, prompts, strict=True) if p.lang == lang]

    langs = sorted({p.lang for p in [*attacks, *benign]})
    return {
        lang: Comparison(
            names[0],
            names[1],
            _paired(pick(a.attack_outcomes, attacks, lang), pick(b.attack_outcomes, attacks, lang)),
            _paired(pick(a.benign_outcomes, benign, lang), pick(b.benign_outcomes, benign, lang)),
        )
        for lang in langs
    }
