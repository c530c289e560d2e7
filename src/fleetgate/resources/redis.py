"""`RedisConnections`: per Redis URL, one lean command connection and one redis-py pool.

Two clients, each for what it does best:

- `commands(url)`: a `fleetgate.resp.RespClient`, one pipelined connection with short timeouts
  and a bounded queue, for the hot path (the limiter's script calls before and after every
  request). Its timeouts break the connection for every command on it, so only short commands
  belong here.
- `client(url)`: a ``redis.asyncio.Redis`` over one connection pool, for pub/sub feeds and
  anything the lean client cannot do (transactions, ``MULTI``/``EXEC`` pipelines, typed
  replies). Each ``pubsub()`` takes its own connection from that pool.

Both are created on first request (no I/O until a command is sent) and closed by `aclose`:
the components using them never close them themselves.

Example::

    redis = RedisConnections()
    limiter = RedisLimiter(redis.commands(url))
    prefixes = PrefixShare(redis.client(url))
    ...
    await redis.aclose()
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fleetgate.resp import RespClient

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisConnections"]

log = logging.getLogger("fleetgate.resources")

COMMAND_TIMEOUT_S = 0.25
"""A reply later than this breaks the lean connection (the limiter's fail-open/closed kicks in)."""
MAX_PENDING = 10_000
"""Commands in flight on the lean connection at most; more are refused at once."""
CONNECT_TIMEOUT_S = 1.0
"""How long the redis-py pool waits for a new connection (feeds reconnect on their own)."""


class RedisConnections:
    """Owns every Redis connection of one gateway process, keyed by URL."""

    def __init__(self) -> None:
        self._commands: dict[str, RespClient] = {}
        self._clients: dict[str, Redis] = {}

    def commands(self, url: str) -> RespClient:
        """The lean pipelined command connection to ``url`` (one per URL)."""
        client = self._commands.get(url)
        if client is None:
            client = RespClient(url, timeout_s=COMMAND_TIMEOUT_S, max_pending=MAX_PENDING)
            self._commands[url] = client
        return client

    def client(self, url: str) -> Redis:
        """The redis-py client (one connection pool) of ``url``, for pub/sub and the rest."""
        client = self._clients.get(url)
        if client is None:
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
            self._clients[url] = client
        return client

    def urls(self) -> list[str]:
        """Every URL a connection was asked for (for diagnostics and tests)."""
        return sorted(set(self._commands) | set(self._clients))

    async def aclose(self) -> None:
        """Close every connection and pool (idempotent); failures are logged, not raised."""
        commands, self._commands = self._commands, {}
        clients, self._clients = self._clients, {}
        for resp in commands.values():
            await resp.aclose()
        for client in clients.values():
            try:
                await client.aclose()
            except Exception as exc:  # a pool already broken by a Redis restart
                log.warning("closing a Redis pool failed: %r", exc)
