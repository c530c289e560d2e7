"""Fixtures: a simulator (instant, and a slow one) for the batch lane's gateways."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleetgate.sim import SimConfig, running_sim


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="random", output_len=6)) as url:
        yield url


@pytest.fixture
async def slow_upstream() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="random", output_len=6, decode_ms_per_step=30)) as url:
        yield url
