"""The performance leg of an evaluation: ``fleetgate bench``'s load generator on one version.

`perf_run` sends ``requests`` synthetic streamed requests (``input_len`` / ``output_len``
length distributions, Poisson arrivals at ``rate`` per second, seeded) to ``ALIAS@VERSION``
through the gateway and returns an eval run (the body of ``POST .../evals``) whose suite names
the load (``perf:rate=10,n=200,in=fixed:128,out=fixed:32,seed=0``; its digest ties runs of the
same load together) and whose metrics are TTFT, TPOT and end-to-end latency p50/p95 (ms),
``request_throughput`` and ``error_rate``. Gate rules read them like any metric, against the
baseline's run of the same load: ``{metric: ttft_p95_ms, max_ratio: 1.1}``.

Example::

    record = perf_run("http://127.0.0.1:4000", "sk-master", "chat@v8", rate=10, requests=200)
"""

from __future__ import annotations

import hashlib
from typing import Any

from fleetgate.bench import LoadPoint, PointOptions, Target, parse_length_dist, run_point, synthetic

__all__ = ["perf_run"]


def perf_run(
    url: str,
    key: str,
    target: str,
    *,
    rate: float = 10.0,
    requests: int = 200,
    input_len: str = "fixed:128",
    output_len: str = "fixed:32",
    seed: int = 0,
) -> dict[str, Any]:
    """One load point on ``target``; the eval run to store (no per-item results)."""
    pool = synthetic(requests, parse_length_dist(input_len), parse_length_dist(output_len),
                     seed=seed)  # fmt: skip
    opts = PointOptions(
        target=Target(url.rstrip("/") + "/v1", model=target, api_key=key), pool=pool,
        seed=seed, percentiles=(50.0, 95.0),
    )  # fmt: skip
    summary = run_point(opts, LoadPoint("rate", rate, max_requests=requests)).summary
    suite = f"perf:rate={rate:g},n={requests},in={input_len},out={output_len},seed={seed}"
    sent = max(1, int(summary["sent"]))
    metrics = {
        "ttft_p50_ms": summary["p50_ttft_ms"], "ttft_p95_ms": summary["p95_ttft_ms"],
        "tpot_p50_ms": summary["p50_tpot_ms"], "tpot_p95_ms": summary["p95_tpot_ms"],
        "e2el_p50_ms": summary["p50_e2el_ms"], "e2el_p95_ms": summary["p95_e2el_ms"],
        "request_throughput": summary["request_throughput"],
        "error_rate": summary["failed"] / sent, "items": float(sent),
    }  # fmt: skip
    return {
        "suite": suite[:200],
        "suite_digest": hashlib.sha256(suite.encode()).hexdigest()[:32],
        "metrics": {k: float(v) for k, v in metrics.items()},
        "comparison": None,
        "items": [],
    }
