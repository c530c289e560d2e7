"""One load point: pick the requests, build the schedule, run it, summarise it.

Example::

    opts = PointOptions(target=Target("http://127.0.0.1:4000/v1", model="m"), pool=specs)
    result = run_point(opts, LoadPoint("rate", 50.0, duration=30, max_requests=2000))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from fleetgate.bench.client import Target
from fleetgate.bench.metrics import DEFAULT_PERCENTILES, summarize, windows
from fleetgate.bench.procs import run_open_loop_processes
from fleetgate.bench.progress import NullProgress, ProgressSink
from fleetgate.bench.runner import RunOutcome, run_closed_loop, run_open_loop, run_sync
from fleetgate.bench.schedule import ArrivalKind, arrival_offsets, trace_offsets
from fleetgate.bench.spec import RequestRecord, RequestSpec
from fleetgate.errors import InvalidRequest, UpstreamError

__all__ = [
    "AllRequestsFailed", "LoadPoint", "PointOptions", "PointResult", "checked_point", "describe",
    "run_point", "run_point_records",
]  # fmt: skip

LoadKind = Literal["rate", "concurrency", "trace"]


@dataclass(frozen=True)
class LoadPoint:
    """How hard to push: ``rate`` (req/s, ``inf`` = all at once), ``concurrency`` (users), or
    ``trace`` (the dataset's own timestamps; ``value`` unused). Bounded by ``max_requests`` and
    ``duration`` seconds (``None`` = until the requests are sent)."""

    kind: LoadKind
    value: float = 0.0
    max_requests: int = 1000
    duration: float | None = None
    arrival: ArrivalKind = "poisson"
    burstiness: float = 1.0


@dataclass
class PointOptions:
    """Everything a point run needs besides the load itself."""

    target: Target
    pool: Sequence[RequestSpec]
    processes: int = 1
    drain_s: float = 30.0
    seed: int = 0
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    goodput_slo_ms: Mapping[str, float] = field(default_factory=dict)
    window_s: float | None = None
    progress: ProgressSink = field(default_factory=NullProgress)
    label: str | None = None


def _take(pool: Sequence[RequestSpec], n: int) -> list[RequestSpec]:
    if not pool:
        raise InvalidRequest("the dataset is empty", param="dataset")
    return [pool[i % len(pool)] for i in range(n)]


def run_point_records(opts: PointOptions, point: LoadPoint) -> RunOutcome:
    """Run one point and return the raw records."""
    if point.kind == "concurrency":
        specs = _take(opts.pool, point.max_requests)
        opts.progress.start(len(specs), f"c={int(point.value)}")
        return run_sync(
            lambda: run_closed_loop(
                opts.target,
                specs,
                int(point.value),
                duration=point.duration,
                drain_s=opts.drain_s,
                progress=opts.progress,
            )
        )
    if point.kind == "trace":
        specs = list(opts.pool[: point.max_requests])
        offsets = trace_offsets([s.at for s in specs])
        label = "trace"
    else:
        specs = _take(opts.pool, point.max_requests)
        offsets = arrival_offsets(
            len(specs),
            rate=point.value,
            kind=point.arrival,
            burstiness=point.burstiness,
            seed=opts.seed,
        )
        label = f"{point.value:g} req/s"
    if opts.processes > 1:
        return run_open_loop_processes(
            opts.target,
            specs,
            offsets,
            opts.processes,
            duration=point.duration,
            drain_s=opts.drain_s,
        )
    opts.progress.start(
        sum(1 for t in offsets if point.duration is None or t < point.duration), label
    )
    return run_sync(
        lambda: run_open_loop(
            opts.target,
            specs,
            offsets,
            duration=point.duration,
            drain_s=opts.drain_s,
            progress=opts.progress,
        )
    )


def describe(
    opts: PointOptions, point: LoadPoint, records: Sequence[RequestRecord]
) -> dict[str, Any]:
    """The ``vllm bench serve`` set-up fields plus ours (``load_kind``, ``offered_load``)."""
    inf = point.kind == "rate" and point.value == float("inf")
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if opts.target.endpoint == "chat" else "openai",
        "backend": "openai-chat" if opts.target.endpoint == "chat" else "openai",
        "label": opts.label,
        "model_id": opts.target.model,
        "tokenizer_id": None,
        "num_prompts": len(records),
        "request_rate": ("inf" if inf else point.value) if point.kind == "rate" else "inf",
        "burstiness": point.burstiness,
        "max_concurrency": int(point.value) if point.kind == "concurrency" else None,
        "load_kind": point.kind,
        "offered_load": point.value,
        "arrival": point.arrival if point.kind == "rate" else None,
        "processes": opts.processes,
    }


@dataclass
class PointResult:
    """The summary (``vllm bench serve`` names, see ``metrics``) and the raw records."""

    summary: dict[str, Any]
    records: list[RequestRecord]


class AllRequestsFailed(UpstreamError):
    """Every request of a point failed: the target refused them all (a run stops sending
    after the first `fleetgate.bench.runner.FAIL_FAST` such answers)."""


def _all_failed(records: Sequence[RequestRecord]) -> AllRequestsFailed | None:
    if not records or any(r.success for r in records):
        return None
    errors: dict[str, int] = {}
    for r in records:
        reason = r.error or f"HTTP {r.status}"
        errors[reason] = errors.get(reason, 0) + 1
    common = max(errors, key=lambda e: errors[e])
    hint = ""
    if any(e.startswith(("HTTP 401", "HTTP 403")) for e in errors):
        hint = " Check the key: --api-key, or FLEETGATE_MASTER_KEY / OPENAI_API_KEY."
    elif any(e.startswith("HTTP 404") for e in errors):
        hint = " Check --model: it must be one the target serves (GET /v1/models)."
    return AllRequestsFailed(
        f"every request failed ({len(records)} sent, stopped early); most common error: "
        f"{common[:300]}.{hint}"
    )


def checked_point(opts: PointOptions, point: LoadPoint) -> PointResult:
    """`run_point`, raising `AllRequestsFailed` when no request of it succeeded (the CLI's
    runner: a profile stops at such a point instead of running the next ones)."""
    result = run_point(opts, point)
    failure = _all_failed(result.records)
    if failure is not None:
        raise failure
    return result


def run_point(opts: PointOptions, point: LoadPoint) -> PointResult:
    """Run one point and summarise it."""
    outcome = run_point_records(opts, point)
    opts.progress.close()
    result = describe(opts, point, outcome.records)
    result |= summarize(
        outcome.records,
        outcome.duration,
        percentiles=opts.percentiles,
        goodput_slo_ms=opts.goodput_slo_ms or None,
    )
    if opts.window_s:
        result["windows"] = windows(outcome.records, opts.window_s)
    return PointResult(result, outcome.records)
