"""Fixtures: a store on SQLite and on the real PostgreSQL, a Redis prefix, a simulator."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetgate.sim import SimConfig, running_sim
from tests.tenancy.support import database_for


@pytest.fixture(params=["sqlite", "postgres"])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database_for(request.param, f"sqlite:///{tmp_path / 'fleetgate.db'}") as url:
        yield url


@pytest.fixture
def redis_prefix() -> str:
    return f"fgtest:{os.getpid()}:{os.urandom(4).hex()}:"


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="random", output_len=12)) as url:
        yield url
