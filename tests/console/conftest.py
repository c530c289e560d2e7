"""Fixtures of the console tests: a fake upstream and a gateway serving the console."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.console.support import Console, running_console
from tests.fakes import FakeUpstream
from tests.tenancy.conftest import db_url

__all__ = ["console", "db_url", "fake"]


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as up:
        yield up


@pytest.fixture
async def console(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[Console]:
    async with running_console(fake.url, tmp_path) as c:
        yield c
