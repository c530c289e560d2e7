"""Turn request records into the ``vllm bench serve`` result fields, plus schedule-lag fields.

Definitions follow ``vllm/benchmarks/serve.py::calculate_metrics``:

- TTFT, ITL (per chunk) and E2E latency as measured by the request function;
- TPOT = (latency - TTFT) / (output_tokens - 1) for requests with more than one output token;
- throughputs divide by ``duration`` (start of the run to the last completion);
- ``request_goodput`` counts requests meeting every per-request SLO (``ttft``, ``tpot``,
  ``e2el`` in ms), TPOT counting as 0 for one-token outputs;
- statistics are ``mean``, ``median``, ``std`` and ``p{N}`` with numpy's linear percentile.

Our additions, with their own names: ``*_itl_per_token_ms`` (a chunk of k tokens gives k
entries of gap/k), ``*_schedule_lag_ms`` (actual send - intended send), ``sent``,
``num_streaming``, ``usage_reported``, ``errors`` (top messages with counts).
Non-streaming requests have no TTFT/ITL/TPOT; for goodput their TTFT is their E2E latency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fleetgate.bench.spec import RequestRecord

__all__ = [
    "DEFAULT_PERCENTILES",
    "RATE_FIELDS",
    "per_token_itl",
    "stat_fields",
    "summarize",
    "windows",
]

# The summary's rates (per second of the run), in the order every table of them shows them.
RATE_FIELDS = (
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "request_goodput",
)

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)


def _pname(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def stat_fields(
    name: str, values_s: Sequence[float], percentiles: Iterable[float] = DEFAULT_PERCENTILES
) -> dict[str, float]:
    """``mean_/median_/std_/p{N}_{name}_ms`` from values in seconds (0 when empty, as vLLM)."""
    arr = np.asarray(values_s if len(values_s) else [0.0], dtype=float) * 1000.0
    out = {
        f"mean_{name}_ms": float(arr.mean()),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(arr.std()),
    }
    for p in percentiles:
        out[f"p{_pname(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def per_token_itl(rec: RequestRecord) -> list[float]:
    """Inter-token latencies of one streamed request, one entry per token after the first."""
    if not rec.itl:
        return []
    if rec.chunk_tokens is not None:
        out: list[float] = []
        for gap, k in zip(rec.itl, rec.chunk_tokens, strict=True):
            if k > 0:
                out.extend([gap / k] * k)
        return out
    tokens = rec.output_tokens - 1
    if tokens == len(rec.itl) or tokens <= 0:
        return list(rec.itl)
    if tokens < len(rec.itl):
        return [sum(rec.itl) / tokens] * tokens
    base, extra = divmod(tokens, len(rec.itl))
    out = []
    for i, gap in enumerate(rec.itl):
        k = base + (1 if i < extra else 0)
        out.extend([gap / k] * k)
    return out


def _goodput_ok(rec: RequestRecord, tpot: float, slo_ms: Mapping[str, float]) -> bool:
    ttft = rec.ttft if rec.ttft is not None else rec.latency
    measured = {"ttft": ttft, "tpot": tpot, "e2el": rec.latency}
    return all(measured[k] * 1000.0 <= v for k, v in slo_ms.items() if k in measured)


def _peaks(ok: Sequence[RequestRecord]) -> tuple[float, int]:
    if not ok:
        return 0.0, 0
    t_min = min(r.sent for r in ok)
    span = int(np.ceil(max(r.sent + r.latency for r in ok) - t_min)) + 1
    tokens = np.zeros(span)
    conc = np.zeros(span)
    for r in ok:
        if r.ttft is not None:
            times = r.sent + r.ttft + np.concatenate(([0.0], np.cumsum(r.itl)))
            np.add.at(tokens, np.clip((times - t_min).astype(int), 0, span - 1), 1)
        a, b = int(r.sent - t_min), int(r.sent + r.latency - t_min)
        conc[a : b + 1] += 1
    return float(tokens.max()), int(conc.max())


def summarize(
    records: Sequence[RequestRecord],
    duration: float,
    *,
    percentiles: Iterable[float] = DEFAULT_PERCENTILES,
    goodput_slo_ms: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The result dict of one load point (vLLM field names first, then ours)."""
    pcts = tuple(percentiles)
    ok = [r for r in records if r.success]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    tpots: list[float] = []
    itls: list[float] = []
    itl_tok: list[float] = []
    good = 0
    for r in ok:
        tpot = 0.0
        if r.ttft is not None and r.output_tokens > 1:
            tpot = (r.latency - r.ttft) / (r.output_tokens - 1)
            tpots.append(tpot)
        itls.extend(r.itl)
        itl_tok.extend(per_token_itl(r))
        if goodput_slo_ms and _goodput_ok(r, tpot, goodput_slo_ms):
            good += 1
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    dur = max(duration, 1e-9)
    peak_tokens, peak_conc = _peaks(ok)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": good / dur if goodput_slo_ms else None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_conc,
    }
    result |= stat_fields("ttft", ttfts, pcts)
    result |= stat_fields("tpot", tpots, pcts)
    result |= stat_fields("itl", itls, pcts)
    result |= stat_fields("e2el", [r.latency for r in ok], pcts)
    result |= stat_fields("itl_per_token", itl_tok, pcts)
    lags = [r.lag for r in records]
    result |= stat_fields("schedule_lag", lags, pcts)
    result["max_schedule_lag_ms"] = max(lags) * 1000.0 if lags else 0.0
    result["sent"] = len(records)
    result["num_streaming"] = sum(1 for r in records if r.stream)
    result["usage_reported"] = sum(1 for r in ok if r.usage_reported)
    result["errors"] = dict(Counter(r.error for r in records if not r.success).most_common(5))
    return result


def windows(records: Sequence[RequestRecord], window_s: float) -> list[dict[str, Any]]:
    """Per-window summaries by send time (soak runs): throughput, TTFT/E2E p95, lag p99."""
    if not records or window_s <= 0:
        return []
    buckets: dict[int, list[RequestRecord]] = {}
    for r in records:
        buckets.setdefault(int(r.intended // window_s), []).append(r)
    out = []
    for b in sorted(buckets):
        recs = buckets[b]
        ok = [r for r in recs if r.success]
        ttfts = [r.ttft for r in ok if r.ttft is not None] or [0.0]
        e2e = [r.latency for r in ok] or [0.0]
        out.append(
            {
                "start_s": b * window_s,
                "sent": len(recs),
                "completed": len(ok),
                "failed": len(recs) - len(ok),
                "request_throughput": len(ok) / window_s,
                "p95_ttft_ms": float(np.percentile(ttfts, 95) * 1000),
                "p95_e2el_ms": float(np.percentile(e2e, 95) * 1000),
                "p99_schedule_lag_ms": float(np.percentile([r.lag for r in recs], 99) * 1000),
            }
        )
    return out
