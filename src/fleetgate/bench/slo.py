"""Service-level objectives for goodput: ``ttft_p95_ms=500,tpot_p95_ms=50,e2el_p99_ms=3000``.

A load point *meets* the SLO when every named percentile of its result is within its limit and
at most ``max_failed_ratio`` of its requests failed. The same limits, read per request
(``ttft``, ``tpot``, ``e2el``), give vLLM's ``request_goodput``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["Slo", "parse_slo"]

_KEY = re.compile(r"^(ttft|tpot|itl|e2el|e2e)_(p\d+(?:\.\d+)?|mean|median)_ms$")


@dataclass(frozen=True)
class Slo:
    """Limits keyed by result field (``p95_ttft_ms``) in milliseconds."""

    limits: Mapping[str, float]
    max_failed_ratio: float = 0.01

    def per_request_ms(self) -> dict[str, float]:
        """vLLM goodput limits (``ttft``/``tpot``/``e2el``), the tightest per metric."""
        out: dict[str, float] = {}
        for field, limit in self.limits.items():
            metric = field.split("_")[1]
            if metric in ("ttft", "tpot", "e2el"):
                out[metric] = min(limit, out.get(metric, limit))
        return out

    def violations(self, result: Mapping[str, Any]) -> list[str]:
        """Human-readable reasons the result misses the SLO (empty when met)."""
        bad = [
            f"{k}={float(result[k]):.1f} > {v:g}"
            for k, v in self.limits.items()
            if float(result.get(k, float("inf"))) > v
        ]
        sent = int(result.get("completed", 0)) + int(result.get("failed", 0))
        if sent == 0:
            bad.append("no request completed")
        elif int(result.get("failed", 0)) / sent > self.max_failed_ratio:
            bad.append(f"failed {result['failed']}/{sent}")
        return bad

    def met(self, result: Mapping[str, Any]) -> bool:
        """True when ``violations`` is empty."""
        return not self.violations(result)


def parse_slo(text: str, max_failed_ratio: float = 0.01) -> Slo:
    """Parse ``ttft_p95_ms=500,e2e_p99_ms=3000`` into result-field limits."""
    limits: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        m = _KEY.match(key.strip())
        if not m or not value:
            raise InvalidRequest(
                f"bad SLO {part!r}: use METRIC_STAT_ms=LIMIT, e.g. ttft_p95_ms=500", param="slo"
            )
        metric = "e2el" if m.group(1) == "e2e" else m.group(1)
        try:
            limits[f"{m.group(2)}_{metric}_ms"] = float(value)
        except ValueError as exc:
            raise InvalidRequest(f"bad SLO limit {value!r}", param="slo") from exc
    if not limits:
        raise InvalidRequest("empty SLO", param="slo")
    return Slo(limits, max_failed_ratio)
