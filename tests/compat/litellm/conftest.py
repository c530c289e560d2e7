"""A simulator upstream for the LiteLLM compatibility tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleetgate.sim import SimConfig, running_sim


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="random", output_len=8)) as url:
        yield url
