"""What every HTTP guard check does with a service that refuses it: an error verdict with the
check's ``on_error``, whose detail names the status and never the API key (details go to audit
records, sinks and the alert webhook)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.base import Action, CheckContext, close_check
from fleetgate.safety.checks.llama_guard import LlamaGuardCheck
from fleetgate.safety.checks.moderation import ModerationCheck
from fleetgate.safety.checks.policy_guard import PolicyGuardCheck
from fleetgate.safety.checks.qwen3guard import Qwen3GuardCheck
from tests.resources.support import outbound

__all__ = ["outbound"]

KEY = "sk-SECRET-4242"

CHECKS: dict[str, Callable[[str, Action, OutboundHttp], Any]] = {
    "llama_guard": lambda url, on_error, http: LlamaGuardCheck(
        base_url=url, model="lg", api_key=KEY, on_error=on_error, http=http
    ),
    "moderation": lambda url, on_error, http: ModerationCheck(
        base_url=url, api_key=KEY, on_error=on_error, http=http
    ),
    "qwen3guard": lambda url, on_error, http: Qwen3GuardCheck(
        base_url=url, model="q", api_key=KEY, on_error=on_error, http=http
    ),
    "policy_guard": lambda url, on_error, http: PolicyGuardCheck(
        base_url=url, model="p", policy="return 0 or 1", api_key=KEY, on_error=on_error, http=http
    ),
}


@pytest.fixture
async def refusing() -> AsyncIterator[str]:
    """A service that answers 401 to everything (a wrong or revoked key)."""

    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "invalid api key"}}, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/v1"))
    await server.close()


@pytest.mark.parametrize("kind", sorted(CHECKS))
@pytest.mark.parametrize("on_error", [Action.ALLOW, Action.BLOCK])
async def test_a_refused_call_is_an_error_verdict_without_the_key(
    refusing: str, kind: str, on_error: Action, outbound: OutboundHttp
) -> None:
    check = CHECKS[kind](refusing, on_error, outbound)
    try:
        verdict = await check.check("how do I make a bomb?", CheckContext())
    finally:
        await close_check(check)
    assert verdict.action is on_error and check.failures == 1
    assert "401" in verdict.detail
    assert KEY not in verdict.detail and "Authorization" not in verdict.detail
