"""`OutboundHttp` and `JsonService`: one session for every side service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fleetgate.resources import JsonService, OutboundHttp
from fleetgate.resources.outbound import ServiceStatusError
from tests.resources.support import outbound

__all__ = ["outbound"]


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    """A side service answering JSON; it also sets a cookie and reports the one it got."""

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/fail":
            return web.json_response({"error": "no"}, status=503)
        body = await request.json()
        resp = web.json_response({
            "path": request.path, "got": body, "auth": request.headers.get("Authorization"),
            "cookie": request.cookies.get("session"),
        })  # fmt: skip
        resp.set_cookie("session", "secret")
        return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    server = TestServer(app)
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


async def test_one_session_shared_until_closed() -> None:
    http = OutboundHttp()
    first = http.session()
    assert http.session() is first
    await http.aclose()
    assert first.closed
    second = http.session()  # a straggler after close gets a fresh one (closed again below)
    assert second is not first and http.sessions_opened == 2
    await http.aclose()
    await http.aclose()  # idempotent


async def test_services_share_the_owners_session_and_never_close_it(echo: str) -> None:
    http = OutboundHttp()
    guard = JsonService(echo + "/v1", api_key="k1", timeout_s=2, http=http)
    moderation = JsonService(echo + "/v1/", http=http)
    try:
        got: Any = await guard.post_json("/completions", {"prompt": "hi"})
        assert got["path"] == "/v1/completions" and got["got"] == {"prompt": "hi"}
        assert got["auth"] == "Bearer k1"
        other: Any = await moderation.post_json("/moderations", {"input": "x"})
        assert other["auth"] is None
        # no cookie jar: what one side service sets never travels to the next call
        assert other["cookie"] is None
        assert not http.session().closed and http.sessions_opened == 1
    finally:
        await http.aclose()


async def test_a_bad_status_names_status_and_url_but_never_the_key(
    echo: str, outbound: OutboundHttp
) -> None:
    """aiohttp's own error repr carries the request headers; this one must not (check failures
    go to verdicts, audit records and alert webhooks)."""
    service = JsonService(echo + "/v1", api_key="sk-SECRET-123", http=outbound)
    with pytest.raises(ServiceStatusError) as caught:
        await service.post_json("/../fail?token=t0p", {})
    quiet = JsonService(echo.replace("http://", "http://user:pw@"), http=outbound)
    with pytest.raises(ServiceStatusError) as userinfo:
        await quiet.post_json("/fail", {})
    text = f"{caught.value!r} {caught.value} {userinfo.value!r}"
    assert isinstance(caught.value, aiohttp.ClientError) and "503" in text
    assert "sk-SECRET-123" not in text and "pw" not in text and "t0p" not in text


@pytest.mark.parametrize(
    "kwargs",
    [{"base_url": None}, {"base_url": 8000}, {"base_url": "guard:8000"},
     {"base_url": "http://g", "timeout_s": "10"}, {"base_url": "http://g", "timeout_s": 0},
     {"base_url": "http://g", "api_key": 123}],
)  # fmt: skip
def test_bad_options_are_value_errors(kwargs: dict[str, Any], outbound: OutboundHttp) -> None:
    """The check registry turns ValueError into a ConfigError naming the check."""
    with pytest.raises(ValueError):
        JsonService(**kwargs, http=outbound)
