"""Arrival schedules are absolute and match their distributions."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgate.bench import arrival_offsets, offsets_for_duration
from fleetgate.errors import InvalidRequest


def test_constant_is_evenly_spaced() -> None:
    assert arrival_offsets(4, rate=10.0) == pytest.approx([0.0, 0.1, 0.2, 0.3])


@pytest.mark.parametrize(("kind", "burst"), [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_random_arrivals_have_the_requested_rate(kind: str, burst: float) -> None:
    offs = arrival_offsets(20_000, rate=100.0, kind=kind, burstiness=burst, seed=1)  # type: ignore[arg-type]
    gaps = np.diff(offs)
    assert gaps.mean() == pytest.approx(0.01, rel=0.05)
    # coefficient of variation of gamma gaps is 1/sqrt(shape)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burst), rel=0.1)
    assert offs == sorted(offs)


def test_same_seed_same_schedule_and_duration_bound() -> None:
    a = arrival_offsets(50, rate=5.0, kind="poisson", seed=3)
    assert a == arrival_offsets(50, rate=5.0, kind="poisson", seed=3)
    offs = offsets_for_duration(2.0, rate=100.0)
    assert len(offs) == 200 and max(offs) < 2.0
    assert arrival_offsets(3, rate=float("inf")) == [0.0, 0.0, 0.0]
    with pytest.raises(InvalidRequest):
        arrival_offsets(3, rate=0.0)
