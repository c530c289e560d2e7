"""What a test hands to what it builds, as the gateway does: the resource owner
(`fleetgate.resources.Resources`) or just its outbound session; both closed after the test, as
the owner closes them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.resources import OutboundHttp, Resources

__all__ = ["outbound", "resources"]


@pytest.fixture
async def outbound() -> AsyncIterator[OutboundHttp]:
    """The owner's outbound session alone, for what takes only that."""
    http = OutboundHttp()
    yield http
    await http.aclose()


@pytest.fixture
async def resources() -> AsyncIterator[Resources]:
    """The resource owner a test builds a runtime on, closed after it as the app closes it."""
    owner = Resources(migrations=MIGRATIONS)
    yield owner
    await owner.aclose()
