"""The routing decision log: why each request went where it went.

Every decision is counted in metrics; a sample (``routing.decision_sample_rate``) is kept in a
bounded in-memory log that the admin API queries (``GET /admin/routing/decisions``).

Metrics (on the app's registry):

- ``fleetgate_routing_decisions_total{alias,strategy,reason}``
- ``fleetgate_routing_prefix_tokens_total{alias,kind}`` -- ``kind`` is ``prompt`` or ``cached``
  (the tokens the router expected the picked engine to serve from its prefix cache)
- ``fleetgate_routing_prefix_hit_ratio{alias}`` -- cached / prompt tokens since start

Example::

    log = DecisionLog(registry, size=2000, sample_rate=0.1)
    log.record(decision)
    log.query(alias="chat", reason="prefix-hit", limit=20)
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from fleetgate.telemetry.registry import Registry

__all__ = ["CandidateCost", "Decision", "DecisionLog", "REASONS"]

REASONS = ("only-candidate", "affinity", "prefix-hit", "load", "hotspot-guard")


@dataclass(frozen=True, slots=True)
class CandidateCost:
    """One candidate's expected time to first token, in seconds, and its parts."""

    deployment: str
    cost_s: float
    queue_s: float
    prefill_s: float
    interference_s: float
    cached_tokens: int
    load: float
    excluded: str | None = None  # why it could not be picked ("hotspot")


@dataclass(frozen=True, slots=True)
class Decision:
    """One routing decision."""

    at: float  # time.time()
    alias: str
    strategy: str
    picked: str
    reason: str
    prompt_tokens: int
    cached_tokens: int
    tenant: str | None = None
    session: str | None = None
    candidates: tuple[CandidateCost, ...] = ()
    # Admission of a queued request (strategy "scheduling"): band, wait, why admitted or shed.
    admission: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DecisionLog:
    """Counts every decision, keeps a sampled, bounded, queryable history."""

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        size: int = 2000,
        sample_rate: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        self._entries: deque[Decision] = deque(maxlen=max(1, size))
        self.sample_rate = sample_rate
        self._rng = rng or random.Random()
        self._prompt: dict[str, float] = {}
        self._cached: dict[str, float] = {}
        r = registry or Registry()
        self._decisions = r.counter(
            "fleetgate_routing_decisions_total",
            "Routing decisions by the reason for the pick.",
            ("alias", "strategy", "reason"),
        )
        self._tokens = r.counter(
            "fleetgate_routing_prefix_tokens_total",
            "Prompt tokens routed, and those expected to hit the engine's prefix cache.",
            ("alias", "kind"),
        )
        ratio = r.gauge(
            "fleetgate_routing_prefix_hit_ratio",
            "Expected prefix-cache hit ratio of routed prompt tokens, per alias.",
            ("alias",),
        )
        ratio.set_collector(self._ratios)

    def resize(self, size: int, sample_rate: float) -> None:
        """Apply a new config (keeps the newest entries)."""
        if size != self._entries.maxlen:
            self._entries = deque(self._entries, maxlen=max(1, size))
        self.sample_rate = sample_rate

    def _ratios(self) -> Iterable[tuple[tuple[str, ...], float]]:
        for alias, prompt in self._prompt.items():
            if prompt > 0:
                yield (alias,), self._cached.get(alias, 0.0) / prompt

    def record(self, decision: Decision) -> None:
        """Count ``decision``; keep it when sampled."""
        alias = decision.alias
        self._decisions.labels(alias, decision.strategy, decision.reason).inc()
        if decision.admission is not None:  # the scheduler's, not a replica pick: no prefix
            if self.sample_rate >= 1.0 or self._rng.random() < self.sample_rate:
                self._entries.append(decision)
            return
        self._tokens.labels(alias, "prompt").inc(decision.prompt_tokens)
        self._tokens.labels(alias, "cached").inc(decision.cached_tokens)
        self._prompt[alias] = self._prompt.get(alias, 0.0) + decision.prompt_tokens
        self._cached[alias] = self._cached.get(alias, 0.0) + decision.cached_tokens
        if self.sample_rate >= 1.0 or self._rng.random() < self.sample_rate:
            self._entries.append(decision)

    def hit_ratio(self, alias: str) -> float | None:
        """Expected cached / prompt tokens routed for ``alias`` since start."""
        prompt = self._prompt.get(alias, 0.0)
        return None if prompt <= 0 else self._cached.get(alias, 0.0) / prompt

    def query(
        self,
        *,
        alias: str | None = None,
        deployment: str | None = None,
        reason: str | None = None,
        tenant: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> list[Decision]:
        """The newest matching decisions first, at most ``limit``."""
        out: list[Decision] = []
        for d in reversed(self._entries):
            if since is not None and d.at < since:
                break
            if alias is not None and d.alias != alias:
                continue
            if deployment is not None and d.picked != deployment:
                continue
            if reason is not None and d.reason != reason:
                continue
            if tenant is not None and d.tenant != tenant:
                continue
            out.append(d)
            if len(out) >= limit:
                break
        return out

    def __len__(self) -> int:
        return len(self._entries)
