"""A small Redis (RESP2) client for the limiter: one pipelined connection, hiredis parsing.

The limiter makes one script call before every request and one after. A general-purpose client
spends far more of the gateway's CPU on each call than Redis spends running the script (pool
checkout, command objects, response callbacks). What the limiter needs is little: send a
command, get its reply. Every command of a process goes down one connection and is answered in
order (Redis pipelines them), so concurrent requests never wait for a free connection; the
commands issued during one turn of the event loop leave in one write (under load that saves a
system call per command; alone, a command leaves a few microseconds later). An ``eager``
command leaves at once when nothing else is in flight (see `RespClient.send_now`).

Failures are plain ``ConnectionError`` / ``TimeoutError`` (both ``OSError``), `CommandNotSent`
when the command certainly never reached Redis; a command that Redis answers with an error
raises `RespError`. A reply later than ``timeout_s`` breaks the
connection (every command on it fails at once, the next one reconnects), and at most
``max_pending`` commands may be in flight, so an unresponsive Redis never builds a queue.

    client = RespClient("redis://127.0.0.1:6379/0")
    await client.call("SET", "k", 1)
    script = Script("return ARGV[1]")
    await client.eval(script, [], ["x"])
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl as ssl_module
import time
from collections import deque
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis

__all__ = ["CommandNotSent", "RespClient", "RespError", "Script", "bulk", "encode_command"]

_MISSING = object()
Arg = bytes | str | int | float


class RespError(Exception):
    """Redis answered a command with an error (``NOSCRIPT ...``, ``WRONGTYPE ...``)."""


class CommandNotSent(ConnectionError):
    """The command never left this process (no connection, or too many waiting): unlike a
    timeout or a connection lost while waiting, Redis certainly did not run it."""


def bulk(value: Arg) -> bytes:
    """One argument as a RESP bulk string."""
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        data = value.encode()
    elif isinstance(value, int | float):
        data = repr(value).encode()
    else:
        raise TypeError(f"cannot send {type(value).__name__} to Redis")
    return b"$%d\r\n%s\r\n" % (len(data), data)


def encode_command(*args: Arg) -> bytes:
    """One command in RESP: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


class Script:
    """A Lua script called by its SHA1; loaded into Redis on first ``NOSCRIPT``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


class _Connection(asyncio.Protocol):
    """One connection; replies resolve the oldest waiting future, in order."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader(replyError=RespError, notEnoughData=_MISSING)
        self.waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.closed = False
        self._out: list[bytes] = []
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.abort(ConnectionError(f"Redis protocol error: {exc}"))
                return
            if reply is _MISSING:
                return
            if not waiting:
                self.abort(ConnectionError("Redis sent a reply nobody asked for"))
                return
            fut = waiting.popleft()[0]
            if fut.done():  # its caller went away; the reply is dropped
                continue
            if isinstance(reply, RespError):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort(ConnectionError(f"Redis connection lost: {exc or 'closed'}"))

    def send(self, data: bytes, eager: bool = False, first: bool = False) -> asyncio.Future[Any]:
        """Queue ``data`` for the write at the end of this loop turn; ``eager``: write it now
        if no command is in flight (then nothing is queued either, and order is kept);
        ``first``: write it now in any case, after whatever this turn had queued (so order is
        kept too), at the cost of one more write."""
        fut = self._loop.create_future()
        if first and self.transport is not None and not self.closed:
            if self._out:  # queued earlier this turn: they go out first, in the same write
                data = b"".join((*self._out, data))
                self._out.clear()  # the pending end-of-turn write finds nothing
            self.transport.write(data)
        elif eager and not self.waiting and self.transport is not None:
            self.transport.write(data)
        else:
            if not self._out:
                self._loop.call_soon(self._write)
            self._out.append(data)
        self.waiting.append((fut, time.monotonic() + self.timeout_s))
        if self._timer is None:
            self._timer = self._loop.call_later(self.timeout_s, self._check)
        return fut

    def _write(self) -> None:
        """Everything sent during one turn of the loop goes out in one write."""
        out, self._out = self._out, []
        if out and self.transport is not None and not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _check(self) -> None:
        self._timer = None
        if not self.waiting:
            return
        late = self.waiting[0][1] - time.monotonic()
        if late <= 0:
            self.abort(TimeoutError(f"Redis did not answer within {self.timeout_s:g} s"))
        else:
            self._timer = self._loop.call_later(late, self._check)

    def abort(self, exc: BaseException) -> None:
        """Fail every waiting command with ``exc`` and drop the connection."""
        self.closed = True
        self._out.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self.waiting:
            fut = self.waiting.popleft()[0]
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()


class RespClient:
    """Commands and scripts over one pipelined connection, reconnected on demand.

    ``redis://[user:password@]host[:port][/db]`` or ``rediss://`` (TLS), ``?password=`` too.
    """

    def __init__(self, url: str, *, timeout_s: float = 0.25, max_pending: int = 10_000) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"not a Redis URL: {url!r} (redis:// or rediss://)")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.tls = parts.scheme == "rediss"
        self.username = unquote(parts.username) if parts.username else None
        password = parts.password
        for item in parts.query.split("&"):
            if item.startswith("password="):
                password = item.partition("=")[2]
        self.password = unquote(password) if password else None
        path = parts.path.strip("/")
        self.db = int(path) if path else 0
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self.connects = 0  # connections made so far (a new one may face a restarted Redis)

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        ssl = ssl_module.create_default_context() if self.tls else None
        async with asyncio.timeout(self.timeout_s):
            _, conn = await loop.create_connection(
                lambda: _Connection(self.timeout_s), self.host, self.port, ssl=ssl
            )
            handshake: list[asyncio.Future[Any]] = []
            if self.password is not None:
                auth = (self.username, self.password) if self.username else (self.password,)
                handshake.append(conn.send(encode_command("AUTH", *auth)))
            if self.db:
                handshake.append(conn.send(encode_command("SELECT", self.db)))
            try:
                await asyncio.gather(*handshake)
            except BaseException:
                conn.abort(ConnectionError("Redis handshake failed"))
                raise
        self._conn = conn
        self.connects += 1
        return conn

    def send_now(self, command: bytes) -> asyncio.Future[Any] | None:
        """Send one encoded command without awaiting anything, and return its reply's future;
        ``None`` when it cannot leave this way (no connection yet, too many waiting): use
        `send`. It is written at once when nothing else is in flight: a command issued just
        before a response is written (a limiter settle) then reaches Redis first, and its reply
        tends to arrive while this process is still busy, sparing it a wake-up."""
        return self._send_nowait(command, eager=True)

    def send_first(self, command: bytes) -> asyncio.Future[Any] | None:
        """Like `send_now`, but written at once even while other commands are in flight: a
        command that must reach Redis before anything this process writes next (a settle that
        frees a full parallel slot, before the response that lets the client send its next
        request to another replica)."""
        return self._send_nowait(command, eager=True, first=True)

    def send_soon(self, command: bytes) -> asyncio.Future[Any] | None:
        """Like `send_now`, but written at the end of this loop turn, with whatever else is
        sent in it: after the work the caller does before it next awaits (a reservation that
        overlaps the upstream call leaves after the upstream request, so the write that wakes
        Redis does not delay it)."""
        return self._send_nowait(command, eager=False)

    def _send_nowait(
        self, command: bytes, *, eager: bool, first: bool = False
    ) -> asyncio.Future[Any] | None:
        conn = self._conn
        if conn is None or conn.closed or len(conn.waiting) >= self.max_pending:
            return None
        return conn.send(command, eager=eager, first=first)

    async def send(self, command: bytes) -> Any:
        """Send one encoded command (`encode_command`) and return its reply."""
        conn = self._conn
        if conn is None or conn.closed:
            try:
                conn = await self._connection()
            except (OSError, TimeoutError) as exc:
                raise CommandNotSent(f"cannot connect to Redis: {exc}") from exc
        if len(conn.waiting) >= self.max_pending:
            raise CommandNotSent(f"{self.max_pending} Redis commands already waiting")
        return await conn.send(command)

    async def call(self, *args: Arg) -> Any:
        return await self.send(encode_command(*args))

    async def eval(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        return await self.eval_encoded(
            script, encode_command("EVALSHA", script.sha, len(keys), *keys, *args)
        )

    async def eval_encoded(
        self, script: Script, evalsha: bytes, sent: asyncio.Future[Any] | None = None
    ) -> Any:
        """Run an already-encoded ``EVALSHA`` of ``script``, loading the script if needed;
        ``sent``: that command's reply from `send_now`."""
        try:
            return await (sent if sent is not None else self.send(evalsha))
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self.call("SCRIPT", "LOAD", script.source)
        return await self.send(evalsha)

    async def aclose(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._conn is not None:
            self._conn.abort(ConnectionError("client closed"))
            self._conn = None
