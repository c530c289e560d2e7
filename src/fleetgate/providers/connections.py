"""A small HTTP/1.1 client for upstream calls: keep-alive pools and httptools parsing.

The general-purpose clients cost more per request than the rest of the gateway together; an
upstream call needs little of what they do: one POST on a kept-alive connection, the status and
headers, then the body at once or chunk by chunk. Requests are written as one buffer, responses
parsed by llhttp (``httptools``), and a connection goes back to its pool only when its response
was read to the end.

Errors are plain ``OSError``/``ConnectionError``/``TimeoutError`` and ``UpstreamBadResponse``;
``providers/transport.py`` maps them into the error tree.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from fleetgate.errors import UpstreamBadResponse

__all__ = ["ConnectionPool", "PooledResponse"]

_HIGH_WATER = 1 << 20  # pause reading when a slow consumer leaves this much unread
_LOW_WATER = 1 << 18


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, key: tuple[str, int, bool]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.requests = 0
        self._loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)  # parses message after message
        self._chunks: list[bytes] = []
        self._error: BaseException | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = True
        self.received_any = False
        self.done = False
        self._chunks.clear()
        self._buffered = 0
        self._paused = False
        self._headers: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamBadResponse("upstream tried to upgrade the connection"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamBadResponse(f"upstream sent malformed HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.done:
            self._fail(exc or ConnectionResetError("upstream closed the connection"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        if self._headers is not None and not self._headers.done():
            self._headers.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        waiter = self._waiter  # _wake, inline: once per upstream read of a stream
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def on_message_complete(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        if self._headers is not None and not self._headers.done():
            self._headers.set_exception(exc)
            self._headers.exception()  # retrieved: no "never retrieved" warning if unawaited
        self._wake()
        self.close()

    # used by the pool and the response
    def send(self, data: bytes) -> asyncio.Future[None]:
        """Write a request; the future is done when the response headers arrived (awaited by
        the caller: no coroutine of its own per request)."""
        self._reset()
        self.requests += 1
        headers = self._headers = self._loop.create_future()
        assert self.transport is not None
        self.transport.write(data)
        return headers

    def take_whole(self) -> bytes | None:
        """The whole body when all of it has arrived (reading never paused), else None."""
        if not self.done or self._error is not None or self._paused:
            return None
        chunks = self._chunks
        body = b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        return body

    async def read_chunk(self) -> bytes:
        """Everything of the body received so far (at least one byte), ``b""`` at its end.

        Pieces that arrived together are returned together, so a relay forwards them in one
        write (an SSE upstream sends one HTTP chunk per event)."""
        while True:
            if self._chunks:
                chunks = self._chunks
                chunk = b"".join(chunks)  # one piece: that same bytes object, not a copy
                chunks.clear()
                self._buffered = 0
                if self._paused and self._buffered < _LOW_WATER and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                return chunk
            if self.done:
                return b""
            if self._error is not None:
                raise self._error
            self._waiter = self._loop.create_future()
            await self._waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None


class PooledResponse:
    """Status, headers and the body of one upstream response; give the connection back with
    `release` (after reading to the end) or drop it with `close`."""

    __slots__ = ("status", "_conn", "_pool", "_raw", "_headers")

    def __init__(self, conn: _Connection, pool: ConnectionPool) -> None:
        self.status = conn.status
        self._conn: _Connection | None = conn
        self._pool = pool
        self._raw = conn.raw_headers  # the connection starts a new list for its next request
        self._headers: CIMultiDictProxy[str] | None = None

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        if self._headers is None:
            self._headers = CIMultiDictProxy(
                CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in self._raw)
            )
        return self._headers

    async def read(self) -> bytes:
        conn = self._conn
        if conn is None:
            return b""
        whole = conn.take_whole()  # most answers: the whole body came with the headers
        if whole is not None:
            return whole
        parts = []
        while chunk := await conn.read_chunk():
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def reader(self) -> Callable[[], Awaitable[bytes]]:
        """The body's reads for a reader that pulls them itself (`fleetgate.sse.SSEBatches`),
        one frame less per read than `iter_chunks`: each returns what was received so far (at
        least one byte), ``b""`` at the end."""
        conn = self._conn
        return conn.read_chunk if conn is not None else _nothing

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        while chunk := await conn.read_chunk():
            yield chunk

    @property
    def complete(self) -> bool:
        """The whole response has been received."""
        return self._conn is not None and self._conn.done

    async def drain(self, timeout: float) -> bool:
        """Read and drop what is left of the body (bounded in time); True when complete."""
        conn = self._conn
        if conn is None:
            return False
        if conn.done:  # most streams: the terminator came with the last event
            return True
        try:
            async with asyncio.timeout(timeout):
                while await conn.read_chunk():
                    pass
        except (TimeoutError, OSError, UpstreamBadResponse):
            return False
        return conn.done

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.put(conn)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


async def _nothing() -> bytes:
    return b""


def _header_lines(headers: Mapping[str, str]) -> str:
    """``Name: value`` lines of ``headers`` without case-insensitive duplicates (the last
    value wins, in the place of the first), Host and Content-Length; one loop, no
    comprehension: this runs for every request's own headers."""
    out: dict[str, tuple[str, str]] = {}
    for k, v in headers.items():
        lowered = k.lower()
        if lowered != "host" and lowered != "content-length":
            out[lowered] = (k, v)
    lines = ""
    for k, v in out.values():
        lines += f"{k}: {v}\r\n"
    return lines


class ConnectionPool:
    """Idle keep-alive connections per (host, port, tls)."""

    def __init__(self, *, keepalive_timeout: float = 60.0, max_idle_per_host: int = 512) -> None:
        self.keepalive_timeout = keepalive_timeout
        self.max_idle_per_host = max_idle_per_host
        self._idle: dict[tuple[str, int, bool], deque[_Connection]] = {}
        self._targets: dict[str, tuple[Mapping[str, str], tuple[str, int, bool], bytes]] = {}
        self._ssl: ssl_module.SSLContext | None = None

    def _target(self, url: str, headers: Mapping[str, str]) -> tuple[tuple[str, int, bool], bytes]:
        """(host, port, tls) and the request head up to Content-Length, rendered once."""
        hit = self._targets.get(url)
        if hit is None or hit[0] is not headers:  # the mapping itself is kept: ids stay unique
            parts = urlsplit(url)
            tls = parts.scheme == "https"
            host = parts.hostname or "localhost"
            port = parts.port or (443 if tls else 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            default = (tls and port == 443) or (not tls and port == 80)
            host_header = host if default else f"{host}:{port}"
            if ":" in host and not host.startswith("["):
                host_header = f"[{host}]" if default else f"[{host}]:{port}"
            lines = _header_lines(headers)
            head = f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\n{lines}".encode("latin-1")
            hit = self._targets[url] = (headers, (host, port, tls), head)
        return hit[1], hit[2]

    def put(self, conn: _Connection) -> None:
        if not (conn.done and conn.keep_alive and conn.usable):
            conn.close()
            return
        idle = self._idle.setdefault(conn.key, deque())
        if len(idle) >= self.max_idle_per_host:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def _take_idle(self, key: tuple[str, int, bool]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest_ok = time.monotonic() - self.keepalive_timeout
        while idle:
            conn = idle.pop()  # most recently used: least likely to have been closed
            if conn.usable and conn.idle_since >= oldest_ok:
                return conn
            conn.close()
        return None

    async def _connect(self, key: tuple[str, int, bool], timeout: float) -> _Connection:
        host, port, tls = key
        loop = asyncio.get_running_loop()
        if tls and self._ssl is None:
            self._ssl = ssl_module.create_default_context()
        async with asyncio.timeout(timeout):
            _, proto = await loop.create_connection(
                lambda: _Connection(key),
                host,
                port,
                ssl=self._ssl if tls else None,
                server_hostname=host if tls else None,
            )
        return proto

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_timeout: float,
        extra: Mapping[str, str] | None = None,
    ) -> PooledResponse:
        """Send a POST and return once the response headers arrived.

        ``headers`` are a deployment's fixed headers (rendered once per URL and mapping);
        ``extra`` are this request's own."""
        key, head = self._target(url, headers)
        if extra:
            lines = _header_lines(extra)
            data = b"".join((head, f"{lines}Content-Length: {len(body)}\r\n\r\n".encode(), body))
        else:
            data = b"".join((head, b"Content-Length: %d\r\n\r\n" % len(body), body))
        for _ in range(2):
            conn = self._take_idle(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, connect_timeout)
            try:
                await conn.send(data)
            except (ConnectionError, OSError):
                conn.close()
                # A kept-alive connection the server closed before reading our request: the
                # request never ran, so one retry on a fresh connection is safe.
                if reused and not conn.received_any:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            return PooledResponse(conn, self)
        raise ConnectionResetError("upstream closed the connection")  # pragma: no cover

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        await asyncio.sleep(0)  # let transports finish closing

    def idle_count(self) -> int:
        return sum(len(d) for d in self._idle.values())
