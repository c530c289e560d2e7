"""Hostile bytes and shapes in a request are 4xx, never 500."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream


async def _raw(port: int, head: bytes, body: bytes = b"") -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return int(status_line.split()[1])


def _request(path: str, headers: dict[bytes, bytes], body: bytes) -> bytes:
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: 127.0.0.1"]
    lines += [k + b": " + v for k, v in headers.items()]
    lines += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


BODY = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}]}'


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/chat/completions", {b"Authorization": b"Bearer sk-\xff\xfe\x80"}),
        ("/v1/messages", {b"x-api-key": b"sk-\xff\xfe\x80", b"anthropic-version": b"2023-06-01"}),
        ("/v1/chat/completions", {b"Authorization": b"Bearer \xc3\xa9t\xc3\xa9"}),
        (
            "/v1/chat/completions",
            {b"Authorization": b"Bearer sk-test-master", b"x-conversation-id": b"c\xff\xfe"},
        ),
    ],
)
async def test_non_utf8_or_non_ascii_headers_are_4xx_not_500(
    gateway: GatewayFactory, upstream: FakeUpstream, path: str, headers: dict[bytes, bytes]
) -> None:
    client = await gateway(one_alias(upstream))
    port = client.server.port
    assert port is not None
    body = BODY
    if path == "/v1/messages":
        body = b'{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'
    status = await _raw(port, _request(path, headers, body), body)
    assert 400 <= status < 500 or status == 200


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [255, 600, 1000])
async def test_deeply_nested_json_is_400(
    gateway: GatewayFactory, upstream: FakeUpstream, depth: int
) -> None:
    client = await gateway(one_alias(upstream))
    nested = b"[" * depth + b'"x"' + b"]" * depth
    body = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"x":' + nested + b"}"
    headers = {**AUTH, "Content-Type": "application/json"}
    resp = await client.post("/v1/chat/completions", data=body, headers=headers)
    assert resp.status == 400
    assert "nests deeper" in (await resp.json())["error"]["message"]
    assert not upstream.seen


async def test_moderate_nesting_still_passes(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "x": _nested(60)}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
