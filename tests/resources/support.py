"""The outbound session a test hands to what it builds, as the resource owner does in the
gateway (`fleetgate.resources.Resources.http`), and closes afterwards as the owner would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleetgate.resources.outbound import OutboundHttp

__all__ = ["outbound"]


@pytest.fixture
async def outbound() -> AsyncIterator[OutboundHttp]:
    http = OutboundHttp()
    yield http
    await http.aclose()
