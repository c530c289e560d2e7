"""Calibrate a plan from a ``fleetgate bench`` (or ``vllm bench serve``) result JSON.

- ``gpu_tokens_per_s``: ``total_token_throughput / gpus`` at the highest-throughput point that
  meets the SLO (every point when no SLO is given);
- ``base_ttft_p95_ms``: ``p95_ttft_ms`` of the least loaded point (``p99`` if p95 is absent);
- ``service_time_s``: ``mean_e2el_ms`` of the least loaded point (how long a request holds a
  slot when nothing queues);
- ``service_cv``, ``base_ttft_mean_ms``, ``base_ttft_std_ms``: spread of that point's E2E
  latency and TTFT, for the discrete-event simulation (``des``);
- ``slots_per_gpu``: Little's law on the service stage at the most loaded point,
  ``request_throughput * (mean_e2el - (mean_ttft - unloaded mean_ttft)) / gpus``, at least 1;
- ``service_full_s``: the time a request holds a slot when every slot is busy,
  ``slots * gpus / request_throughput`` at that point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleetgate.bench.slo import Slo
from fleetgate.errors import InvalidRequest

__all__ = ["BenchCalibration", "calibrate"]


@dataclass(frozen=True)
class BenchCalibration:
    """Per-GPU figures measured by bench, ready for ``PlanInputs``."""

    gpu_tokens_per_s: float
    base_ttft_p95_ms: float
    service_time_s: float
    slots_per_gpu: int
    point_offered_load: float
    service_cv: float = 0.0
    base_ttft_mean_ms: float = 0.0
    base_ttft_std_ms: float = 0.0
    service_full_s: float | None = None
    tokens_per_request: float = 0.0

    def scaled_to(self, tokens_per_request: float) -> BenchCalibration:
        """Holding times scaled to requests of another size (linear in tokens: a first-order
        correction when the plan's requests are not the benched ones)."""
        if self.tokens_per_request <= 0:
            return self
        r = tokens_per_request / self.tokens_per_request
        return replace(
            self,
            service_time_s=self.service_time_s * r,
            service_full_s=None if self.service_full_s is None else self.service_full_s * r,
            tokens_per_request=tokens_per_request,
        )


def _points(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pts = result.get("points")
    return list(pts) if isinstance(pts, list) else [result]


def calibrate(result: Mapping[str, Any], *, gpus: int, slo: Slo | None = None) -> BenchCalibration:
    """Per-GPU throughput and queueing figures from a bench result of ``gpus`` GPUs."""
    if gpus < 1:
        raise InvalidRequest("gpus must be >= 1", param="bench_gpus")
    points = [p for p in _points(result) if p.get("completed")]
    if not points:
        raise InvalidRequest("the bench result has no completed requests", param="from_bench")
    ok = [p for p in points if slo is None or slo.met(p)]
    if not ok:
        raise InvalidRequest("no point of the bench result meets the SLO", param="slo")
    best = max(ok, key=lambda p: float(p["total_token_throughput"]))
    low = min(points, key=lambda p: float(p["request_throughput"]))
    high = max(points, key=lambda p: float(p["request_throughput"]))
    service_s = float(low["mean_e2el_ms"]) / 1000.0
    base_mean_s = float(low.get("mean_ttft_ms", 0.0)) / 1000.0
    # Little's law on the service stage at the most loaded point: time in a slot is E2E minus
    # the queueing part of TTFT (TTFT above the unloaded TTFT).
    wait_high = max(0.0, float(high.get("mean_ttft_ms", 0.0)) / 1000.0 - base_mean_s)
    in_slot = max(service_s, float(high["mean_e2el_ms"]) / 1000.0 - wait_high)
    x_high = float(high["request_throughput"])
    slots = max(1, round(x_high * in_slot / gpus))
    full_s = slots * gpus / x_high if x_high > 0 else service_s
    return BenchCalibration(
        gpu_tokens_per_s=float(best["total_token_throughput"]) / gpus,
        base_ttft_p95_ms=float(low.get("p95_ttft_ms", low.get("p99_ttft_ms", 0.0))),
        service_time_s=service_s,
        slots_per_gpu=slots,
        point_offered_load=float(best.get("offered_load", best["request_throughput"])),
        service_cv=float(low.get("std_e2el_ms", 0.0)) / max(float(low["mean_e2el_ms"]), 1e-9),
        base_ttft_mean_ms=float(low.get("mean_ttft_ms", 0.0)),
        base_ttft_std_ms=float(low.get("std_ttft_ms", 0.0)),
        service_full_s=max(service_s, full_s),
        tokens_per_request=float(low["total_token_throughput"]) / float(low["request_throughput"])
        if float(low["request_throughput"]) > 0
        else 0.0,
    )
