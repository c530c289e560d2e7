"""The paired bootstrap and percentiles."""

from __future__ import annotations

import pytest

from fleetgate.releases.stats import paired_bootstrap, percentile


def test_paired_bootstrap_brackets_the_difference() -> None:
    base = [1.0] * 200
    worse = [0.0 if i % 10 == 0 else 1.0 for i in range(200)]  # 10% wrong
    delta, low, high = paired_bootstrap(worse, base, seed=1)
    assert delta == pytest.approx(-0.1)
    assert low < delta < high < 0  # clearly worse: the interval excludes zero
    assert paired_bootstrap(worse, base, seed=1) == (delta, low, high)  # seeded
    same = paired_bootstrap(base, base)
    assert same == (0.0, 0.0, 0.0)
    one_off = [0.0] + [1.0] * 199
    _, low, high = paired_bootstrap(one_off, base)
    assert low < 0 <= high + 1e-9 and high == 0.0
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 0.0])


def test_percentile() -> None:
    assert percentile([], 95) is None
    assert percentile(list(range(1, 101)), 95) == 95
    assert percentile([5.0], 50) == 5.0
