"""Prefill/decode pool sizing for a workload, from per-engine speeds.

An engine's speed (`EngineSpeed`, measured with `fleetgate.plan.engine_probe` against one
engine, vLLM or the simulator, or typed in) is what the simulator models: a prefill costs
``prefill_ms_per_token`` per uncached prompt token and runs one prefill after another; a decode
step with ``b`` running sequences takes ``t(b) = decode_ms_per_step * (1 + decode_batch_factor *
(b - 1))`` and gives each of them one token.

**Decode pool** (``D`` engines). A request decodes for ``output_tokens`` steps, so by Little's
law each engine runs ``b = (rate / D) * output_tokens * t(b)`` sequences, i.e. with ``k = (rate
/ D) * output_tokens * decode_ms_per_step / 1000`` and ``f = decode_batch_factor``::

    b = k * (1 - f) / (1 - k * f)          (stable only while k * f < 1)

``D`` is the fewest engines whose ``t(b)`` (the inter-token latency) is within the ITL target
and whose ``b`` fits ``max_num_seqs`` (and the KV cache, when its size is given).

**Prefill pool** (``P`` engines). A request's prefill holds an engine for ``S = prompt_tokens *
(1 - cached_fraction) * prefill_ms_per_token``, or the whole prompt's time for the
``cold_fraction`` of requests that find nothing cached (a document's first request on an
engine). Its TTFT is the wait for a prefill engine, then
``S``, the KV pull (of the uncached tokens, ``* kv_transfer_ms_per_token``: a decode engine
already holds the shared prefix, as a prefill engine does) and the decode engine's next
step and its own (``1.5 * t(b)``), plus each engine's ``request_overhead_ms`` twice (the
prefill request and the decode request). Its quantile comes from a discrete-event simulation of the
prefill pool (`prefill_ttft_quantile_s`: ``P`` engines first come first served, Poisson
arrivals, each prefill's own time gamma-distributed around ``S`` with spread ``service_cv``,
so a long prefill is slow itself and delays those queued behind it); ``P`` is the fewest
engines whose TTFT quantile meets the target and whose utilisation ``rate * S / P`` stays under
``max_utilization``.

Example::

    speed = EngineSpeed(prefill_ms_per_token=0.05, decode_ms_per_step=10, decode_batch_factor=0.01)
    plan = size_pd(PdWorkload(rate=8, prompt_tokens=8192, output_tokens=24,
                              cached_fraction=0.75, ttft_ms=600, itl_ms=15), speed)
    plan["prefill_engines"], plan["decode_engines"]
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fleetgate.errors import InvalidRequest

__all__ = ["EngineSpeed", "PdWorkload", "decode_batch", "prefill_ttft_quantile_s", "size_pd"]

MAX_ENGINES = 4096


@dataclass(frozen=True)
class EngineSpeed:
    """One engine's speed (see the module docstring)."""

    prefill_ms_per_token: float
    decode_ms_per_step: float
    decode_batch_factor: float = 0.01
    max_num_seqs: int = 256
    kv_transfer_ms_per_token: float = 0.0025
    kv_cache_tokens: int | None = None  # the engine's KV cache size, when known
    # an engine's time for a request beyond its modelled compute (HTTP, parsing, tokenizing)
    request_overhead_ms: float = 0.0

    def step_ms(self, running: float) -> float:
        """One decode step with ``running`` sequences."""
        return self.decode_ms_per_step * (1.0 + self.decode_batch_factor * max(0.0, running - 1))


@dataclass(frozen=True)
class PdWorkload:
    """Requests per second, mean lengths, the share of the prompt a prefix cache serves, and
    the targets: TTFT at quantile ``quantile`` and the inter-token latency (None: no target)."""

    rate: float
    prompt_tokens: float
    output_tokens: float
    cached_fraction: float = 0.0
    cold_fraction: float = 0.0  # requests that find nothing cached (a document's first use)
    ttft_ms: float | None = None
    itl_ms: float | None = None
    quantile: float = 0.9
    service_cv: float = 0.0
    max_utilization: float = 0.85

    def uncached_tokens(self) -> float:
        """Mean prompt tokens a prefill computes."""
        warm = self.prompt_tokens * (1 - self.cached_fraction)
        return (1 - self.cold_fraction) * warm + self.cold_fraction * self.prompt_tokens

    def validate(self) -> None:
        if self.rate <= 0 or self.prompt_tokens <= 0 or self.output_tokens < 1:
            raise InvalidRequest("rate and prompt_tokens must be > 0, output_tokens >= 1")
        if not 0 <= self.cached_fraction < 1:
            raise InvalidRequest("cached_fraction must be within [0, 1)", param="cached_fraction")
        if not 0 <= self.cold_fraction <= 1:
            raise InvalidRequest("cold_fraction must be within [0, 1]", param="cold_fraction")
        if not 0.5 <= self.quantile < 1 or not 0 < self.max_utilization < 1:
            raise InvalidRequest("quantile must be within [0.5, 1), max_utilization in (0, 1)")


def decode_batch(speed: EngineSpeed, rate_per_engine: float, output_tokens: float) -> float:
    """Sequences one decode engine runs at ``rate_per_engine`` (``inf`` when it cannot keep
    up: every added sequence slows the step more than it adds)."""
    k = rate_per_engine * output_tokens * speed.decode_ms_per_step / 1000.0
    f = speed.decode_batch_factor
    if k * f >= 1.0:
        return math.inf
    return max(k * (1.0 - f) / (1.0 - k * f), k)


def _decode_fits(speed: EngineSpeed, w: PdWorkload, batch: float) -> str | None:
    """Why ``batch`` sequences per engine miss the targets (None: they meet them)."""
    if math.isinf(batch) or batch > speed.max_num_seqs:
        return "max_num_seqs"
    if w.itl_ms is not None and speed.step_ms(batch) > w.itl_ms:
        return "itl"
    if speed.kv_cache_tokens and batch * (w.prompt_tokens + w.output_tokens) > (
        speed.kv_cache_tokens
    ):
        return "kv_cache"
    return None


def _size_decode(speed: EngineSpeed, w: PdWorkload) -> tuple[int, float] | None:
    if w.itl_ms is not None and speed.step_ms(1) > w.itl_ms:
        return None  # even a lone sequence is slower than the target
    for d in range(1, MAX_ENGINES + 1):
        batch = decode_batch(speed, w.rate / d, w.output_tokens)
        if _decode_fits(speed, w, batch) is None:
            return d, batch
    return None


def prefill_ttft_quantile_s(
    *,
    rate: float,
    engines: int,
    service_s: float,
    service_cv: float,
    fixed_s: float,
    q: float,
    cold_fraction: float = 0.0,
    cold_service_s: float = 0.0,
    n: int = 20_000,
    seed: int = 0,
) -> float:
    """The ``q`` quantile of ``wait + own prefill + fixed_s`` on ``engines`` prefill engines
    (FCFS, Poisson arrivals at ``rate``); ``inf`` when they cannot keep up. A prefill takes
    ``service_s``, or ``cold_service_s`` for a ``cold_fraction`` of them, spread
    ``service_cv``."""
    rng = np.random.default_rng(seed)
    means = np.where(rng.random(n) < cold_fraction, cold_service_s, service_s)
    if rate * float(means.mean()) >= engines:
        return math.inf
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    if service_cv > 1e-6:
        shape = 1.0 / service_cv**2
        service = rng.gamma(shape, means / shape)
    else:
        service = means
    free = [0.0] * engines  # when each engine is next free (a heap)
    ttft = np.empty(n)
    for i in range(n):
        start = max(arrivals[i], heapq.heappop(free))
        end = start + service[i]
        heapq.heappush(free, end)
        ttft[i] = end - arrivals[i]
    warm = n // 10  # the first tenth sees an empty pool: left out
    return float(np.quantile(ttft[warm:], q)) + fixed_s


def _ttft_ms(speed: EngineSpeed, w: PdWorkload, engines: int, step_ms: float) -> float:
    per_token_s = speed.prefill_ms_per_token / 1000.0
    warm_s = w.prompt_tokens * (1 - w.cached_fraction) * per_token_s
    fixed_ms = w.uncached_tokens() * speed.kv_transfer_ms_per_token + 1.5 * step_ms
    fixed_s = (fixed_ms + 2 * speed.request_overhead_ms) / 1000.0  # the prefill and the decode
    return 1000.0 * prefill_ttft_quantile_s(
        rate=w.rate,
        engines=engines,
        service_s=max(warm_s, 1e-9),
        service_cv=w.service_cv,
        fixed_s=fixed_s,
        q=w.quantile,
        cold_fraction=w.cold_fraction,
        cold_service_s=w.prompt_tokens * per_token_s,
    )


def _size_prefill(speed: EngineSpeed, w: PdWorkload, step_ms: float) -> tuple[int, float] | None:
    service_s = w.uncached_tokens() * speed.prefill_ms_per_token / 1000.0
    p = max(1, math.ceil(w.rate * service_s / w.max_utilization))
    ttft = _ttft_ms(speed, w, p, step_ms)
    if w.ttft_ms is None:
        return p, ttft
    if _ttft_ms(speed, w, MAX_ENGINES, step_ms) > w.ttft_ms:
        return None  # the unloaded TTFT alone misses the target
    while ttft > w.ttft_ms and p < MAX_ENGINES:
        p += 1
        ttft = _ttft_ms(speed, w, p, step_ms)
    return p, ttft


def size_pd(workload: PdWorkload, speed: EngineSpeed) -> dict[str, Any]:
    """The prefill and decode pool sizes for ``workload`` (JSON-ready; ``None`` engine counts
    with a ``note`` when a target cannot be met at any size)."""
    workload.validate()
    if speed.prefill_ms_per_token <= 0 or speed.decode_ms_per_step <= 0:
        raise InvalidRequest("the engine's prefill and decode times must be > 0")
    out: dict[str, Any] = {"workload": asdict(workload), "engine": asdict(speed)}
    decode = _size_decode(speed, workload)
    if decode is None:
        out.update(prefill_engines=None, decode_engines=None, total_engines=None,
                   note="no decode pool meets the ITL target: a single sequence's step is "
                        "slower than it")  # fmt: skip
        return out
    d, batch = decode
    step = speed.step_ms(batch)
    prefill = _size_prefill(speed, workload, step)
    service_ms = workload.uncached_tokens() * speed.prefill_ms_per_token
    out.update(
        decode_engines=d,
        decode_batch=round(batch, 2),
        predicted_itl_ms=round(step, 3),
        prefill_service_ms=round(service_ms, 3),
    )
    if prefill is None:
        out.update(prefill_engines=None, total_engines=None,
                   note="no prefill pool meets the TTFT target: the unloaded TTFT (prefill, KV "
                        "pull, first decode step) is already over it")  # fmt: skip
        return out
    p, ttft = prefill
    out.update(
        prefill_engines=p,
        total_engines=p + d,
        prefill_utilization=round(workload.rate * service_ms / 1000.0 / p, 3),
        predicted_ttft_ms=round(ttft, 1),
    )
    return out
