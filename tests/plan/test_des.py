"""The discrete-event simulation agrees with queueing theory where theory is exact."""

from __future__ import annotations

import math

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.plan import ttft_quantile_des


def test_mm1_wait_quantile() -> None:
    # M/M/1, rate 0.8, service 1 s: P(W > t) = 0.8 exp(-0.2 t), P95 = 5 ln 16
    got = ttft_quantile_des(
        rate=0.8,
        servers=1,
        service_mean_s=1.0,
        service_cv=1.0,
        base_ttft_mean_s=0.0,
        n=100_000,
        seed=7,
    )
    assert got == pytest.approx(5 * math.log(16), rel=0.1)


def test_light_load_is_the_unloaded_ttft_and_overload_is_infinite() -> None:
    light = ttft_quantile_des(rate=1.0, servers=8, service_mean_s=0.05, base_ttft_mean_s=0.02)
    assert light == pytest.approx(0.02, abs=1e-9)
    assert (
        ttft_quantile_des(rate=100, servers=2, service_mean_s=0.05, base_ttft_mean_s=0.0)
        == math.inf
    )
    with pytest.raises(InvalidRequest):
        ttft_quantile_des(rate=0, servers=1, service_mean_s=1, base_ttft_mean_s=0)


def test_batching_slowdown_raises_the_tail() -> None:
    kw = dict(rate=60.0, servers=4, service_mean_s=0.05, base_ttft_mean_s=0.01)
    flat = ttft_quantile_des(**kw)  # type: ignore[arg-type]
    slowed = ttft_quantile_des(**kw, service_full_s=0.06)  # type: ignore[arg-type]
    assert slowed > flat
