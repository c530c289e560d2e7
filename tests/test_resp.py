"""The limiter's Redis client: commands and scripts against the real Redis, pipelining,
error replies, scripts loaded on NOSCRIPT, and every failure bounded in time and count."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator

import pytest

from fleetgate.resp import RespClient, RespError, Script, encode_command
from tests.tenancy.support import REDIS_URL, free_port

pytestmark = pytest.mark.redis


@pytest.fixture
async def client() -> AsyncIterator[RespClient]:
    c = RespClient(REDIS_URL, timeout_s=1.0)
    try:
        yield c
    finally:
        await c.aclose()


@pytest.fixture
def key() -> str:
    return f"fgtest:resp:{os.getpid()}:{os.urandom(4).hex()}"


def test_commands_are_encoded_as_arrays_of_bulk_strings() -> None:
    assert encode_command("SET", "k", 12, b"\x00v") == (
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n$2\r\n\x00v\r\n"
    )
    with pytest.raises(TypeError):
        encode_command("SET", "k", None)  # type: ignore[arg-type]


async def test_replies_of_every_type(client: RespClient, key: str) -> None:
    assert await client.call("SET", key, "v", "PX", 5000) == b"OK"
    assert await client.call("GET", key) == b"v"
    assert await client.call("GET", key + ":missing") is None
    assert await client.call("INCRBY", key + ":n", 5) == 5
    assert await client.call("RPUSH", key + ":l", "a", "b") == 2
    assert await client.call("LRANGE", key + ":l", 0, -1) == [b"a", b"b"]
    await client.call("DEL", key + ":n", key + ":l")


async def test_concurrent_commands_share_one_connection_in_order(
    client: RespClient, key: str
) -> None:
    results = await asyncio.gather(*(client.call("INCR", key) for _ in range(500)))
    assert sorted(results) == list(range(1, 501))
    assert results == list(range(1, 501))  # replies resolve in the order commands were sent
    clients = await client.call("CLIENT", "LIST")
    own_id = await client.call("CLIENT", "ID")
    assert f"id={own_id} ".encode() in clients
    await client.call("DEL", key)


async def test_an_error_reply_raises_and_the_connection_stays_usable(
    client: RespClient, key: str
) -> None:
    await client.call("SET", key, "text", "PX", 5000)
    with pytest.raises(RespError, match="not an integer"):
        await client.call("INCR", key)
    assert await client.call("GET", key) == b"text"


async def test_send_now_writes_at_once_when_nothing_is_in_flight(
    client: RespClient, key: str
) -> None:
    assert client.send_now(encode_command("PING")) is None  # not connected yet: use send
    await client.call("PING")
    conn = client._conn
    assert conn is not None
    fut = client.send_now(encode_command("SET", key, "a"))
    assert fut is not None and not conn._out  # written, not queued for the end of the turn
    queued = client.send_now(encode_command("APPEND", key, "b"))  # one in flight: queued
    assert queued is not None and conn._out
    later = asyncio.ensure_future(client.call("APPEND", key, "c"))
    assert await fut == b"OK" and await queued == 2 and await later == 3
    assert await client.call("GET", key) == b"abc"  # in order


async def test_send_first_writes_at_once_behind_what_the_turn_queued(
    client: RespClient, key: str
) -> None:
    await client.call("PING")
    conn = client._conn
    assert conn is not None
    written: list[bytes] = []
    transport = conn.transport
    assert transport is not None
    real_write = transport.write

    def spy(data: bytes) -> None:
        written.append(bytes(data))
        real_write(data)

    transport.write = spy  # type: ignore[method-assign]
    try:
        fut = client.send_now(encode_command("SET", key, "a"))  # written: one in flight
        queued = client.send_soon(encode_command("APPEND", key, "b"))  # end of the turn
        first = client.send_first(encode_command("APPEND", key, "c"))  # now, behind "b"
        assert fut is not None and queued is not None and first is not None
        assert not conn._out and len(written) == 2  # nothing left for the end of the turn
        assert written[1] == encode_command("APPEND", key, "b") + encode_command("APPEND", key, "c")
        assert await fut == b"OK" and await queued == 2 and await first == 3
        assert await client.call("GET", key) == b"abc"  # in order
        assert len(written) == 3  # the GET; the end-of-turn write found nothing
    finally:
        transport.write = real_write  # type: ignore[method-assign]


async def test_scripts_are_loaded_when_redis_does_not_know_them(client: RespClient) -> None:
    script = Script(f"return {{ARGV[1], KEYS[1], '{os.urandom(4).hex()}'}}")
    assert await client.call("SCRIPT", "EXISTS", script.sha) == [0]
    out = await client.eval(script, ["k1"], ["a1"])
    assert out[:2] == [b"a1", b"k1"]
    assert await client.call("SCRIPT", "EXISTS", script.sha) == [1]


async def test_a_caller_that_gives_up_does_not_shift_later_replies(
    client: RespClient, key: str
) -> None:
    slow = asyncio.ensure_future(client.call("BLPOP", key + ":never", 0.3))
    fast = asyncio.ensure_future(client.call("ECHO", "after"))
    await asyncio.sleep(0.05)
    slow.cancel()
    assert await fast == b"after"  # pipelined behind the blocking call, answered after it
    assert await client.call("ECHO", "next") == b"next"


async def test_url_database_and_password_are_applied(key: str) -> None:
    c = RespClient("redis://127.0.0.1:6379/3")
    try:
        await c.call("SET", key, "in-db-3", "PX", 5000)
        assert await c.call("CLIENT", "INFO") and (b" db=3 " in await c.call("CLIENT", "INFO"))
    finally:
        await c.aclose()
    wrong = RespClient("redis://:not-the-password@127.0.0.1:6379/0")
    try:
        with pytest.raises(RespError):  # AUTH refused: this Redis has no password
            await wrong.call("PING")
    finally:
        await wrong.aclose()
    with pytest.raises(ValueError):
        RespClient("http://127.0.0.1:6379")


async def test_a_lost_connection_fails_what_is_in_flight_then_reconnects(
    client: RespClient, key: str
) -> None:
    own_id = await client.call("CLIENT", "ID")
    blocked = asyncio.ensure_future(client.call("BLPOP", key, 5))
    await asyncio.sleep(0.05)
    killer = RespClient(REDIS_URL)
    try:
        await killer.call("CLIENT", "KILL", "ID", own_id)
    finally:
        await killer.aclose()
    with pytest.raises(ConnectionError):
        await blocked
    assert await client.call("PING") == b"PONG"
    assert await client.call("CLIENT", "ID") != own_id


async def test_nothing_listening_fails_fast() -> None:
    c = RespClient(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(OSError):
            await c.call("PING")
        assert loop.time() - started < 1.0
    finally:
        await c.aclose()


async def test_a_silent_server_breaks_the_connection_at_the_timeout() -> None:
    """A Redis that accepts but never answers: commands fail after ``timeout_s``, every one
    of them at once, and no more than ``max_pending`` are ever waiting."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = await asyncio.start_server(silent, sock=sock)
    c = RespClient(f"redis://127.0.0.1:{sock.getsockname()[1]}/0", timeout_s=0.2, max_pending=5)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        calls = [asyncio.ensure_future(c.call("PING")) for _ in range(5)]
        await asyncio.sleep(0.01)
        with pytest.raises(ConnectionError, match="already waiting"):
            await c.call("PING")  # the sixth is refused at once
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, TimeoutError) for r in results)
        assert 0.15 < loop.time() - started < 1.0
        # the next command tries a new connection (and times out the same way)
        with pytest.raises(TimeoutError):
            await c.call("PING")
        assert len(accepted) == 2
    finally:
        await c.aclose()
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()
