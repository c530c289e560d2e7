"""A version's outcomes over a window, read back from every replica's rows (`read_window`).

`fleetgate.releases.outcomes.OutcomeBook` writes one row per replica, alias, version and
``BUCKET_MS`` bucket, with histograms of latency, TTFT and TPOT in bins 10% wide (`hist_bin`);
`read_window` sums the rows of one version since a time into a `VersionWindow`, whose rates
and 95th percentiles the rollout analysis (`fleetgate.releases.analysis`) judges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import select

from fleetgate.releases.tables import release_outcomes
from fleetgate.store.database import Database

__all__ = [
    "BUCKET_MS",
    "VersionWindow",
    "bin_lower_edge",
    "hist_bin",
    "hist_percentile",
    "read_window",
    "window_of",
]

BUCKET_MS = 2000
_GROWTH = math.log(1.1)  # histogram bins: each 10% wider than the last


def hist_bin(ms: float) -> int:
    """The histogram bin of ``ms``: bin k holds (1.1^(k-1), 1.1^k] ms, bin 0 up to 1 ms."""
    return 0 if ms <= 1.0 else math.ceil(math.log(ms) / _GROWTH)


def bin_lower_edge(k: int) -> float:
    """The smallest value (ms, exclusive) bin ``k`` holds: bin k is (1.1^(k-1), 1.1^k]."""
    return 0.0 if k <= 0 else math.exp((k - 1) * _GROWTH)


def hist_percentile(hist: Mapping[Any, int], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of a histogram, as its bin's upper edge (ms)."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for k in sorted(hist, key=int):
        seen += hist[k]
        if seen >= rank:
            return round(math.exp(int(k) * _GROWTH), 3)
    return None  # pragma: no cover - rank <= total


def _add(into: dict[str, int], hist: Mapping[Any, int]) -> None:
    for k, n in hist.items():
        into[str(k)] = into.get(str(k), 0) + int(n)


@dataclass(frozen=True)
class VersionWindow:
    """One version's requests on one alias over a window, summed over every replica."""

    requests: int = 0
    errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    blocked: int = 0
    latency_p95_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None
    ttft_samples: int = 0
    tpot_samples: int = 0
    feedback: int = 0  # feedback on this version's requests in the window (filled by analysis)
    negative: int = 0
    # the histograms (bin -> count, bins 10% wide) the p95s come from: the analysis's tests
    hists: Mapping[str, Mapping[str, int]] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "hists"}
        return {
            **out, "error_rate": round(self.error_rate, 4),
            "block_rate": round(self.block_rate, 4), "negative_rate": round(self.negative_rate, 4),
        }  # fmt: skip

    def share_over(self, name: str, limit_ms: float) -> tuple[int, int] | None:
        """(observations certainly over ``limit_ms``, all observations) of histogram ``name``
        (``latency``, ``ttft``, ``tpot``); None when it was not kept."""
        hist = self.hists.get(name)
        if not hist:
            return None
        over = sum(n for k, n in hist.items() if bin_lower_edge(int(k)) >= limit_ms)
        return over, sum(hist.values())

    @property
    def error_rate(self) -> float:
        """Failed upstream attempts over attempts (a failed request is at least one)."""
        return self.failed_attempts / self.attempts if self.attempts else 0.0

    @property
    def block_rate(self) -> float:
        return self.blocked / self.requests if self.requests else 0.0

    @property
    def negative_rate(self) -> float:
        return self.negative / self.feedback if self.feedback else 0.0


async def read_window(db: Database, alias: str, version: str, since_ms: int) -> VersionWindow:
    """``version``'s outcomes on ``alias`` in the buckets that begin at ``since_ms`` or later
    (what came before it, even in the same bucket, never counts: a rollout started again just
    after a rollback is not judged on the old one's failures), summed over every replica."""
    start = -(-since_ms // BUCKET_MS) * BUCKET_MS
    stmt = select(release_outcomes).where(
        release_outcomes.c.alias == alias,
        release_outcomes.c.version == version,
        release_outcomes.c.bucket_ms >= start,
    )
    async with db.engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return window_of(rows)


def window_of(rows: Iterable[Any]) -> VersionWindow:
    n = {"requests": 0, "errors": 0, "attempts": 0, "failed_attempts": 0, "blocked": 0}
    hists: dict[str, dict[str, int]] = {"latency": {}, "ttft": {}, "tpot": {}}
    for r in rows:
        for name in n:
            n[name] += int(getattr(r, name))
        for name, into in hists.items():
            _add(into, getattr(r, name) or {})
    return VersionWindow(
        **n,
        latency_p95_ms=hist_percentile(hists["latency"], 95),
        ttft_p95_ms=hist_percentile(hists["ttft"], 95),
        tpot_p95_ms=hist_percentile(hists["tpot"], 95),
        ttft_samples=sum(hists["ttft"].values()),
        tpot_samples=sum(hists["tpot"].values()),
        hists=hists,
    )
