"""Queueing-based sizing: Erlang-C (M/M/c) for the time a request waits before its prefill.

The fleet is ``c = gpus * slots_per_gpu`` servers (a slot is one concurrent sequence a GPU runs
at its rated throughput); a request holds a slot for ``service_s`` seconds. TTFT P95 is the
unloaded TTFT P95 plus the P95 of the queueing wait::

    P(wait > t) = C(c, a) * exp(-(c/service_s - rate) * t),   a = rate * service_s

Example::

    erlang_c(10, 8.0)                 # probability an arrival has to wait
    wait_quantile_s(10, 8.0, 1.0, 0.95)
"""

from __future__ import annotations

import math

from fleetgate.errors import InvalidRequest

__all__ = ["erlang_c", "min_servers_for_wait", "wait_quantile_s"]


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with ``c`` servers and offered load ``a`` Erlangs."""
    if c <= 0:
        raise InvalidRequest("servers must be >= 1", param="servers")
    if a <= 0:
        return 0.0
    if a >= c:
        return 1.0
    b = 1.0  # Erlang B by the stable recursion B(k) = a B(k-1) / (k + a B(k-1))
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    rho = a / c
    return b / (1 - rho + rho * b)


def wait_quantile_s(c: int, rate: float, service_s: float, q: float) -> float:
    """The ``q`` quantile of the wait (seconds); ``inf`` when the servers cannot keep up."""
    a = rate * service_s
    if a >= c:
        return math.inf
    pw = erlang_c(c, a)
    tail = 1.0 - q
    if pw <= tail:
        return 0.0
    return math.log(pw / tail) / (c / service_s - rate)


def min_servers_for_wait(rate: float, service_s: float, q: float, max_wait_s: float) -> int:
    """Fewest servers whose ``q``-quantile wait is at most ``max_wait_s`` (binary search)."""
    lo = max(1, math.floor(rate * service_s) + 1)
    if wait_quantile_s(lo, rate, service_s, q) <= max_wait_s:
        return lo
    hi = lo * 2
    while wait_quantile_s(hi, rate, service_s, q) > max_wait_s:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wait_quantile_s(mid, rate, service_s, q) <= max_wait_s:
            hi = mid
        else:
            lo = mid
    return hi
