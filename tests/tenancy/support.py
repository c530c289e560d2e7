"""Shared helpers of the tenancy, limits and store tests: real PostgreSQL, Redis, gateways."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.app import MIGRATIONS, create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.http.serving import served
from fleetgate.store import Database
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy
from fleetgate.tenancy.writer import RecordWriter
from tests.procs import free_port

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
MASTER = "sk-master-test"
PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.6, "cached_input_per_mtok": 0.075}
# The params of a fixture over both stores; the PostgreSQL one carries the ``postgres`` marker.
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

_SqliteUrl = TypeVar("_SqliteUrl", str, None)


async def create_pg_database() -> str:
    """A fresh, uniquely named database; returns its URL."""
    name = f"fg_test_{os.getpid()}_{os.urandom(4).hex()}"
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


async def drop_pg_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@asynccontextmanager
async def pg_database() -> AsyncIterator[str]:
    """The URL of a fresh PostgreSQL database, dropped on the way out."""
    url = await create_pg_database()
    try:
        yield url
    finally:
        await drop_pg_database(url)


@asynccontextmanager
async def database_for(kind: str, sqlite_url: _SqliteUrl) -> AsyncIterator[_SqliteUrl | str]:
    """``sqlite_url`` for ``kind`` "sqlite" (None: the gateway's default file); for "postgres"
    a fresh PostgreSQL database (`pg_database`)."""
    if kind == "sqlite":
        yield sqlite_url
        return
    async with pg_database() as url:
        yield url


@asynccontextmanager
async def migrated_database(kind: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated `Database` of ``kind`` ("sqlite": a file under ``tmp_path``, "postgres")."""
    async with database_for(kind, None) as url:
        db = Database.from_url(url, tmp_path, migrations=MIGRATIONS)
        try:
            await db.migrate()
            yield db
        finally:
            await db.aclose()


def gateway_config(
    upstream: str,
    price: dict[str, float] | None = None,
    multimodal: dict[str, Any] | None = None,
    **tenancy: Any,
) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            **({"multimodal": multimodal} if multimodal else {}),
            "models": [
                {
                    "alias": "tiny",
                    "deployments": [
                        {
                            "provider": "openai",
                            "model": "tiny",
                            "api_base": f"{upstream}/v1",
                            "price": price or PRICE,
                        }
                    ],
                },
                {
                    "alias": "other",
                    "deployments": [
                        {"provider": "openai", "model": "tiny", "api_base": f"{upstream}/v1"}
                    ],
                },
            ],
            "health": {"probe_interval_s": 30},
            "tenancy": {"spend_flush_interval_s": 0.05, "poll_interval_s": 0.2, **tenancy},
        }
    )


@dataclass
class Gateway:
    url: str
    app: web.Application
    session: aiohttp.ClientSession

    @property
    def tenancy(self) -> Tenancy:
        return self.app[GATEWAY].core.ports.require(TENANCY)

    async def admin(
        self, method: str, path: str, key: str = MASTER, **kwargs: Any
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.session.request(method, self.url + path, headers=headers, **kwargs) as resp:
            return resp.status, await resp.json()

    async def chat(
        self, key: str, *, alias: str = "tiny", max_tokens: int = 16, request_id: str | None = None
    ) -> tuple[int, dict[str, str], Any]:
        headers = {"Authorization": f"Bearer {key}"}
        if request_id:
            headers["x-request-id"] = request_id
        body = {
            "model": alias,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens,
        }
        async with self.session.post(
            self.url + "/v1/chat/completions", json=body, headers=headers
        ) as resp:
            headers = {k.lower(): v for k, v in resp.headers.items()}
            return resp.status, headers, await resp.json()

    async def team_and_key(self, name: str, **key_fields: Any) -> tuple[str, str, str]:
        """Create a team and a key in it; returns (team_id, key_id, key)."""
        team_fields = key_fields.pop("team_fields", {})
        status, team = await self.admin("POST", "/admin/teams", json={"name": name, **team_fields})
        assert status == 201, team
        status, key = await self.admin(
            "POST", "/admin/keys", json={"team": team["id"], **key_fields}
        )
        assert status == 201, key
        return team["id"], key["id"], key["key"]


@asynccontextmanager
async def running_gateway(
    upstream: str,
    data_dir: Path,
    database_url: str | None,
    redis_url: str | None = None,
    price: dict[str, float] | None = None,
    multimodal: dict[str, Any] | None = None,
    **tenancy: Any,
) -> AsyncIterator[Gateway]:
    settings = Settings(
        master_key=MASTER,
        data_dir=data_dir,
        database_url=database_url,
        redis_url=redis_url,
        watch_config=False,
    )
    app = create_app(settings, gateway_config(upstream, price, multimodal, **tenancy))
    async with served(app) as url, aiohttp.ClientSession() as session:
        yield Gateway(url, app, session)


async def wait_for(predicate: Any, timeout: float = 5.0, interval: float = 0.05) -> None:
    """Poll an async predicate until it is true (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError("condition not met in time")


class TcpProxy:
    """A loopback TCP proxy that can be cut (every connection dropped, new ones refused),
    stalled (connections accepted and kept, nothing forwarded: a black hole) and restored: a
    database or Redis outage without stopping the shared server. ``replies`` (an event, set
    by default): clear it to hold the server's replies (requests still pass), set it to let
    them through in order: a slow round trip, controlled by the test."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.stalled = False
        self.replies = asyncio.Event()
        self.replies.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: bool = False
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self.stalled:
                    continue  # swallowed: the other side hears nothing
                if reply:
                    await self.replies.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        tasks = [
            asyncio.ensure_future(self._pipe(reader, up_writer)),
            asyncio.ensure_future(self._pipe(up_reader, writer, reply=True)),
        ]
        for t in tasks:
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        await asyncio.gather(*tasks, return_exceptions=True)
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def stall(self) -> None:
        """Keep accepting and holding connections, forward nothing."""
        self.stalled = True

    async def restore(self) -> None:
        if self.stalled:  # what was swallowed broke the streams: start them afresh
            self.stalled = False
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()
        if self._server is None:
            await self.start()

    async def close(self) -> None:
        await self.cut()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)


async def crash_writer(writer: RecordWriter) -> None:
    """What a killed process leaves of a record writer: its spool files, unlocked, and no
    open connection (its thread's own is closed here so that nothing leaks into the test)."""
    for seg in [*writer._closed, *([writer._current] if writer._current else [])]:
        seg.close()
    if writer._thread is not None:
        await writer._in_thread(writer._sink.close)
        writer._thread.shutdown(wait=False)


@asynccontextmanager
async def gateway_via_redis_proxy(
    upstream: str, data_dir: Path, redis_prefix: str, **tenancy: Any
) -> AsyncIterator[tuple[Gateway, TcpProxy]]:
    """A gateway (SQLite store) whose Redis is the shared one behind a `TcpProxy` the test
    can cut, stall or hold the replies of; the proxy lets replies through again at the end."""
    proxy = TcpProxy(6379)
    await proxy.start()
    try:
        async with running_gateway(
            upstream,
            data_dir,
            None,
            f"redis://127.0.0.1:{proxy.port}/0",
            redis_prefix=redis_prefix,
            **tenancy,
        ) as gw:
            yield gw, proxy
    finally:
        proxy.replies.set()
        await proxy.close()
