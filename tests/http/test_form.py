"""A posted form that cannot be read is a 400, never a 500 (`fleetgate.http.form`, and the
error middleware for aiohttp's own parser errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.api.errors import error_middleware
from fleetgate.http.form import read_form

BOUNDARY = "b0undary"
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
URLENCODED = {"Content-Type": "application/x-www-form-urlencoded"}


def _multipart(disposition: bytes, value: bytes) -> bytes:
    return (
        f"--{BOUNDARY}\r\nContent-Disposition: ".encode() + disposition + b"\r\n\r\n" + value
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )  # fmt: skip


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async def fields(request: web.Request) -> web.Response:
        return web.json_response(await read_form(request))

    async def raw(request: web.Request) -> web.Response:  # aiohttp's reader, untranslated
        return web.json_response({k: str(v) for k, v in (await request.post()).items()})

    app = web.Application(middlewares=[error_middleware])
    app.router.add_routes([web.post("/form", fields), web.post("/raw", raw)])
    async with TestClient(TestServer(app)) as c:
        yield c


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        (_multipart(b'form-data; name="f"; filename="a\x00b"', b"x"), MULTIPART, None),
        (_multipart(b'form-data; name="name"', b"\xed\xa0\x80"), MULTIPART, None),
        (b"name=a%00b", URLENCODED, "name"),
        (b"a%00=1", URLENCODED, "a\\u0000"),
    ],
)
async def test_a_form_that_cannot_be_read_or_stored_is_400(
    client: TestClient[Any, Any], body: bytes, headers: dict[str, str], param: str | None
) -> None:
    resp = await client.post("/form", data=body, headers=headers)
    error = (await resp.json())["error"]
    assert (resp.status, error["type"], error["param"]) == (400, "invalid_request_error", param)


async def test_a_part_header_aiohttp_refuses_is_400_on_any_route(
    client: TestClient[Any, Any],
) -> None:
    body = _multipart(b'form-data; name="f"; filename="a\x00b"', b"x")
    resp = await client.post("/raw", data=body, headers=MULTIPART)
    error = (await resp.json())["error"]
    assert (resp.status, error["type"]) == (400, "invalid_request_error"), error


async def test_a_good_form_is_read(client: TestClient[Any, Any]) -> None:
    resp = await client.post("/form", data=b"name=caf%C3%A9&team=t", headers=URLENCODED)
    assert await resp.json() == {"name": "café", "team": "t"}
