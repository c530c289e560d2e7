"""A short discrete-event simulation of the TTFT a fleet gives at a request rate.

The fleet is ``servers`` slots (GPUs x concurrent sequences per GPU) served first come, first
served; requests arrive as a Poisson process at ``rate``, hold a slot for a gamma-distributed
time (mean ``service_mean_s`` when alone, growing linearly to ``service_full_s`` when every
slot is busy, as continuous batching slows each sequence; coefficient of variation
``service_cv``, 0 = fixed), and see
``TTFT = wait for a slot + unloaded TTFT`` (normal, mean/std as measured at low load). Unlike
Erlang-C (exponential service) this fits engines whose requests take about the same time,
which is what continuous batching with similar lengths looks like.

Example::

    ttft_quantile_des(rate=50, servers=4, service_mean_s=0.06, base_ttft_mean_s=0.01)
"""

from __future__ import annotations

import heapq

import numpy as np

from fleetgate.errors import InvalidRequest

__all__ = ["ttft_quantile_des"]


def ttft_quantile_des(
    *,
    rate: float,
    servers: int,
    service_mean_s: float,
    base_ttft_mean_s: float,
    service_cv: float = 0.0,
    base_ttft_std_s: float = 0.0,
    service_full_s: float | None = None,
    q: float = 0.95,
    n: int = 20_000,
    seed: int = 0,
) -> float:
    """The ``q`` quantile of TTFT in seconds (``inf`` when the load exceeds the slots)."""
    if rate <= 0 or servers < 1 or service_mean_s <= 0 or n < 10:
        raise InvalidRequest("rate, servers, service time and n must be positive")
    if rate * service_mean_s >= servers:
        return float("inf")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    if service_cv > 1e-6:
        shape = 1.0 / service_cv**2
        service = rng.gamma(shape, service_mean_s / shape, n)
    else:
        service = np.full(n, service_mean_s)
    base = np.maximum(0.0, rng.normal(base_ttft_mean_s, base_ttft_std_s, n))
    # Batching slows every sequence down as the batch fills: scale the holding time linearly
    # from ``service_mean_s`` (alone) to ``service_full_s`` (all slots busy).
    slope = 0.0
    if service_full_s is not None and servers > 1:
        slope = (service_full_s / service_mean_s - 1.0) / (servers - 1)
    ends: list[float] = []  # end times of the requests holding a slot
    waits = np.empty(n)
    start = 0.0
    for i in range(n):
        start = max(arrivals[i], start)  # first come, first served
        while ends and ends[0] <= start:
            heapq.heappop(ends)
        if len(ends) >= servers:
            start = heapq.heappop(ends)
        waits[i] = start - arrivals[i]
        heapq.heappush(ends, start + service[i] * (1.0 + slope * len(ends)))
    warm = n // 10  # the first tenth sees an empty fleet: leave it out
    return float(np.quantile(waits[warm:] + base[warm:], q))
