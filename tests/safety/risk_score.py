"""A scored check for cascade tests: ``RiskScore`` (0, 0.5 or 1 by risky words found) and a
built-in registry that also knows it as ``type: risk_score``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.base import Check, CheckContext, Verdict
from fleetgate.safety.registry import CheckRegistry, builtin_registry

RISKY = {"ransomware", "attack", "exploit", "poison", "weapon", "steal"}


class RiskScore:
    """A scored check: the share of its risky words among the first two found (0, 0.5, 1)."""

    def __init__(self, *, name: str) -> None:
        self.name = name
        self.seen: list[str] = []

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        self.seen.append(text)
        hits = sum(1 for w in text.lower().split() if w.strip(".,?!") in RISKY)
        return Verdict.allow(self.name, score=min(hits, 2) / 2, detail=f"hits={hits}")


def risk_registry(http: OutboundHttp) -> CheckRegistry:
    registry = builtin_registry(http=http)

    def build(name: str, options: Mapping[str, Any]) -> Check:
        return RiskScore(name=name, **options)

    registry.register("risk_score", build)
    return registry
