"""A cascade: cheap checks first, the offline classifier next, a guard model only for what is
still uncertain.

Each stage is a check of any registered type. A stage *without* a band decides when it flags
(block or mask) and passes the text on otherwise (word lists: a hit is certain, a miss is
not). A stage *with* a band ``uncertain: [low, high]`` decides on its score: at or above
``high`` it blocks, below ``low`` it allows (and the later stages never run), and in between it
escalates. The last stage's verdict stands, whatever its score. A stage that cannot decide
(endpoint down) escalates when a later stage exists; at the last stage the check's own
``on_error`` applies (as for a plain guard check).

Example::

    checks:
      input_cascade:
        type: cascade
        options:
          stages:
            - {type: words}
            - {type: classifier, uncertain: [0.2, 0.8]}
            - {type: llama_guard, options: {base_url: "http://guard:8000/v1", model: llama-guard}}

Per-stage latency and decisions are exported as ``fleetgate_safety_cascade_seconds{check,stage}``
and ``fleetgate_safety_cascade_decisions_total{check,stage,decision}`` (decision: ``block``,
``mask``, ``allow``, ``escalate``, ``error``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetgate.safety.base import Action, Check, CheckContext, Verdict

if TYPE_CHECKING:
    from fleetgate.safety.metrics import SafetyMetrics

__all__ = ["CascadeCheck", "CascadeStage"]


@dataclass(frozen=True, slots=True)
class CascadeStage:
    """One stage: its check and, for a scored check, the band of scores that escalate."""

    name: str
    check: Check
    uncertain: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.uncertain is not None:
            low, high = self.uncertain
            if not 0.0 <= low <= high <= 1.0:
                raise ValueError(
                    f"stage {self.name!r}: uncertain must be [low, high] with 0 <= low <= high <= 1"
                )


class CascadeCheck:
    """Runs its stages in order and stops at the first that is sure (see the module doc)."""

    def __init__(
        self, *, name: str, stages: Sequence[CascadeStage], on_error: Action = Action.ALLOW
    ) -> None:
        if len(stages) < 2:
            raise ValueError("a cascade needs at least two stages")
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names repeat: {names}")
        self.name = name
        self.stages = tuple(stages)
        self.on_error = on_error
        self.decisions: Counter[tuple[str, str]] = Counter()  # (stage, decision) -> count
        self._metrics: SafetyMetrics | None = None

    def bind_metrics(self, metrics: SafetyMetrics) -> None:
        """Export per-stage latency and decisions through ``metrics`` (the policy calls it)."""
        self._metrics = metrics

    def _count(self, stage: str, decision: str, seconds: float) -> None:
        self.decisions[(stage, decision)] += 1
        if self._metrics is not None:
            self._metrics.cascade_decisions.labels(self.name, stage, decision).inc()
            self._metrics.cascade_seconds.labels(self.name, stage).observe(seconds)

    def _decided(self, stage: CascadeStage, verdict: Verdict, action: Action) -> Verdict:
        detail = f"{stage.name}: {verdict.detail or f'score {verdict.score:.2f}'}"
        if action is Action.BLOCK:
            cats = verdict.categories or ("unsafe",)
            return Verdict.block(self.name, cats, score=verdict.score, detail=detail)
        if action is Action.MASK and verdict.masked_text is not None:
            return Verdict.mask(self.name, verdict.categories, verdict.masked_text, detail=detail)
        return Verdict.allow(self.name, score=verdict.score, detail=detail)

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        last = len(self.stages) - 1
        for i, stage in enumerate(self.stages):
            started = time.perf_counter()
            verdict = await stage.check.check(text, ctx)
            took = time.perf_counter() - started
            if verdict.error:
                self._count(stage.name, "error", took)
                if i < last:
                    continue
                return Verdict.failed(self.name, f"{stage.name}: {verdict.detail}",
                                      action=self.on_error)  # fmt: skip
            if stage.uncertain is None or i == last:
                if verdict.flagged or i == last:
                    self._count(stage.name, verdict.action.value, took)
                    return self._decided(stage, verdict, verdict.action)
                self._count(stage.name, "escalate", took)
                continue
            low, high = stage.uncertain
            if verdict.score >= high:
                self._count(stage.name, "block", took)
                return self._decided(stage, verdict, Action.BLOCK)
            if verdict.score < low:
                self._count(stage.name, "allow", took)
                return self._decided(stage, verdict, Action.ALLOW)
            self._count(stage.name, "escalate", took)
        raise AssertionError("unreachable: the last stage always decides")

    async def warm_up(self) -> None:
        for stage in self.stages:
            warm = getattr(stage.check, "warm_up", None)
            if warm is not None:
                await warm()

    async def aclose(self) -> None:
        for stage in self.stages:
            aclose = getattr(stage.check, "aclose", None)
            if aclose is not None:
                await aclose()
                continue
            close = getattr(stage.check, "close", None)
            if close is not None:
                close()
