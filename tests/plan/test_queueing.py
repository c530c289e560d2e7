"""Erlang-C against textbook values."""

from __future__ import annotations

import math

import pytest

from fleetgate.plan import erlang_c, min_servers_for_wait, wait_quantile_s


def test_erlang_c_known_values() -> None:
    # M/M/1: P(wait) = rho
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    # c=2, a=1: C = 1/3
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(3, 3.0) == 1.0


def test_wait_quantile_and_sizing() -> None:
    # M/M/1 rate 0.5, service 1 s: P(W>t) = 0.5 e^{-0.5 t}; P95 at t = 2 ln 10
    assert wait_quantile_s(1, 0.5, 1.0, 0.95) == pytest.approx(2 * math.log(10))
    assert wait_quantile_s(1, 2.0, 1.0, 0.95) == math.inf
    c = min_servers_for_wait(100.0, 1.0, 0.95, 0.01)
    assert wait_quantile_s(c, 100.0, 1.0, 0.95) <= 0.01 < wait_quantile_s(c - 1, 100.0, 1.0, 0.95)
