from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.base import Action, CheckContext, close_check
from fleetgate.safety.checks.moderation import ModerationCheck
from tests.resources.support import outbound

__all__ = ["outbound"]


async def moderations(request: web.Request) -> web.Response:
    body: dict[str, Any] = await request.json()
    assert request.headers["Authorization"] == "Bearer k"
    text = str(body["input"])
    violent = "kill" in text
    return web.json_response({
        "id": "modr-1", "model": body["model"],
        "results": [{
            "flagged": violent,
            "categories": {"violence": violent, "harassment": False},
            "category_scores": {"violence": 0.97 if violent else 0.01, "harassment": 0.3},
        }],
    })  # fmt: skip


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/moderations", moderations)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    yield str(srv.make_url("/v1"))
    await srv.close()


async def test_flagged_input_blocks_with_the_endpoint_categories(
    server: str, outbound: OutboundHttp
) -> None:
    check = ModerationCheck(http=outbound, base_url=server, api_key="k")
    try:
        bad = await check.check("I will kill him", CheckContext())
        ok = await check.check("hello", CheckContext())
    finally:
        await close_check(check)
    assert bad.action is Action.BLOCK and bad.categories == ("violence",)
    assert bad.score == pytest.approx(0.97)
    assert ok.action is Action.ALLOW


async def test_threshold_flags_on_scores(server: str, outbound: OutboundHttp) -> None:
    check = ModerationCheck(http=outbound, base_url=server, api_key="k", threshold=0.25)
    try:
        v = await check.check("hello", CheckContext())
    finally:
        await close_check(check)
    assert v.action is Action.BLOCK and v.categories == ("harassment",)


async def test_unreachable_endpoint_is_a_counted_error(outbound: OutboundHttp) -> None:
    srv = TestServer(web.Application(), host="127.0.0.1")
    await srv.start_server()
    url = str(srv.make_url("/v1"))
    await srv.close()
    check = ModerationCheck(http=outbound, base_url=url, timeout_s=2)
    try:
        v = await check.check("x", CheckContext())
    finally:
        await close_check(check)
    assert v.error and v.action is Action.ALLOW and check.failures == 1
