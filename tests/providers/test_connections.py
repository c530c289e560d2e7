"""The upstream HTTP/1.1 pool: keep-alive reuse, chunked bodies, stale connections, errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from fleetgate.errors import UpstreamBadResponse
from fleetgate.providers.connections import ConnectionPool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


@pytest.fixture
async def server() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await handler(reader, writer)
            finally:
                writer.close()

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        srv = await asyncio.start_server(closing, sock=sock)
        servers.append(srv)
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"

    yield start
    for srv in servers:
        srv.close()
        await srv.wait_closed()


async def test_keep_alive_reuses_one_connection(
    server: Callable[[Handler], Awaitable[str]],
) -> None:
    connections = 0
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                seen.append(await _read_request(reader))
            except asyncio.IncompleteReadError:
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up: yes\r\n\r\nok")
            await writer.drain()
        writer.close()

    url = await server(handler)
    pool = ConnectionPool()
    for _ in range(5):
        resp = await pool.post(url, b'{"a":1}', {"Authorization": "Bearer k"}, connect_timeout=1)
        assert resp.status == 200 and resp.headers["x-up"] == "yes"
        assert await resp.read() == b"ok"
        resp.release()
    await pool.aclose()
    assert connections == 1
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 7\r\n" in seen[0] and seen[0].endswith(b'{"a":1}')
    assert b"Authorization: Bearer k\r\n" in seen[0]


async def test_chunked_stream_arrives_in_pieces(
    server: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    pool = ConnectionPool()
    resp = await pool.post(await server(handler), b"{}", {}, connect_timeout=1)
    chunks = [c async for c in resp.iter_chunks()]
    assert chunks == [b"data: 1\n\n", b"data: 2\n\n"]
    resp.release()
    assert pool.idle_count() == 1
    await pool.aclose()


async def test_stale_kept_alive_connection_is_retried_once(
    server: Callable[[Handler], Awaitable[str]],
) -> None:
    connections = answered = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections, answered
        connections += 1
        first = connections == 1
        await _read_request(reader)
        answered += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        if first:  # the idle connection dies as the next request arrives, unanswered
            await _read_request(reader)

    url = await server(handler)
    pool = ConnectionPool()
    for _ in range(2):
        resp = await pool.post(url, b"{}", {}, connect_timeout=1)
        assert await resp.read() == b"ok"
        resp.release()
    await pool.aclose()
    assert (connections, answered) == (2, 2)


async def test_close_mid_body_and_garbage(server: Callable[[Handler], Awaitable[str]]) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()

    pool = ConnectionPool()
    resp = await pool.post(await server(cut), b"{}", {}, connect_timeout=1)
    with pytest.raises(ConnectionError):
        await resp.read()
    resp.close()
    with pytest.raises(UpstreamBadResponse):
        await pool.post(await server(garbage), b"{}", {}, connect_timeout=1)
    with pytest.raises(OSError):
        await pool.post("http://127.0.0.1:9/x", b"{}", {}, connect_timeout=1)
    await pool.aclose()


async def test_request_headers_go_out_once_each_with_the_last_value(
    server: Callable[[Handler], Awaitable[str]],
) -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await _read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    url = await server(handler)
    pool = ConnectionPool()
    extra = {"X-Trace": "a", "x-trace": "b", "Host": "evil", "content-length": "9"}
    resp = await pool.post(
        url, b"{}", {"Content-Type": "application/json"}, connect_timeout=5, extra=extra
    )
    assert await resp.read() == b"{}"
    resp.release()
    await pool.aclose()
    head = seen[0].split(b"\r\n\r\n")[0].lower().split(b"\r\n")
    assert [h for h in head if h.startswith(b"x-trace")] == [b"x-trace: b"]
    assert sum(h.startswith(b"host:") for h in head) == 1 and b"host: evil" not in head
    assert [h for h in head if h.startswith(b"content-length")] == [b"content-length: 2"]
