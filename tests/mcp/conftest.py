"""Fixtures of the MCP gateway tests: the two upstream servers and a gateway in front of them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from tests.tenancy.support import (
    MASTER,
    Gateway,
    create_pg_database,
    drop_pg_database,
    free_port,
    served,
    wait_for,
)

UPSTREAMS = str(Path(__file__).with_name("upstreams.py"))
NOTES_TOKEN = "upstream-notes-credential-7f3a"
FILES_TOKEN = "upstream-files-credential-91bc"


class HttpUpstream:
    """The "notes" server over streamable HTTP on 127.0.0.1 (needs the bearer NOTES_TOKEN);
    it can be killed and started again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, UPSTREAMS, "http", str(self.port), NOTES_TOKEN],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(300):  # bounded: 30 s
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            await asyncio.sleep(0.1)
        raise AssertionError("the notes MCP server did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


@pytest.fixture
async def notes() -> AsyncIterator[HttpUpstream]:
    upstream = HttpUpstream()
    try:
        await upstream.start()
        yield upstream
    finally:
        upstream.kill()


def mcp_section(notes_url: str, **overrides: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "servers": {
            "notes": {
                "transport": "http",
                "url": notes_url,
                "headers": {"Authorization": f"Bearer {NOTES_TOKEN}"},
                "price_per_call_usd": 0.002,
                "tool_prices_usd": {"add": 0.0125},
            },
            "files": {
                "transport": "stdio",
                "command": sys.executable,
                "args": [UPSTREAMS, "stdio"],
                "secret_env": {"FILES_TOKEN": FILES_TOKEN},
                "price_per_call_usd": 0.001,
            },
        },
        "access": {
            "teams": {"research": ["notes__*", "files__*"], "narrow": ["notes__echo"]},
        },
        "ping_interval_s": 0.3,
        "reconnect_s": 0.2,
    }
    section.update(overrides)
    return section


def gateway_config(mcp: dict[str, Any], safety: bool = True) -> GatewayConfig:
    data: dict[str, Any] = {
        "models": [
            {
                "alias": "tiny",
                "deployments": [
                    {"provider": "openai", "model": "tiny", "api_base": "http://127.0.0.1:9/v1"}
                ],
            }
        ],
        "health": {"probe_interval_s": 30},
        "tenancy": {"spend_flush_interval_s": 0.05, "poll_interval_s": 0.2},
        "mcp": mcp,
    }
    if safety:
        data["safety"] = {
            "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
            "policies": {"default": {"input": ["words", "pii"], "actions": {"pii": "mask"}}},
        }
    return GatewayConfig.model_validate(data)


StartGateway = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start_gateway(tmp_path: Path) -> AsyncIterator[StartGateway]:
    """Start a gateway (tenancy on SQLite) for an ``mcp:`` section; closed at the end."""
    stack = contextlib.AsyncExitStack()

    async def start(
        mcp: dict[str, Any],
        safety: bool = True,
        database_url: str | None = None,
        redis_url: str | None = None,
        tenancy: bool = True,
    ) -> Gateway:
        settings = Settings(
            master_key=MASTER,
            data_dir=tmp_path,
            database_url=database_url or f"sqlite:///{tmp_path / 'fleetgate.db'}",
            redis_url=redis_url,
            watch_config=False,
        )
        config = gateway_config(mcp, safety)
        if not tenancy:
            off = config.tenancy.model_copy(update={"enabled": False})
            config = config.model_copy(update={"tenancy": off})
        if redis_url:  # a prefix of its own: counters never meet another test's
            prefix = f"fgtest:mcp:{os.getpid()}:{os.urandom(4).hex()}:"
            tenancy = config.tenancy.model_copy(update={"redis_prefix": prefix})
            config = config.model_copy(update={"tenancy": tenancy})
        app = create_app(settings, config)
        url = await stack.enter_async_context(served(app))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        gateway = Gateway(url, app, session)

        async def all_connected() -> bool:  # a loaded machine starts the stdio server slowly
            _, servers = await gateway.admin("GET", "/admin/mcp/servers")
            return all(s["connected"] for s in servers["data"])

        await wait_for(all_connected, timeout=30, interval=0.1)
        return gateway

    async with stack:
        yield start


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store: SQLite, and a new database on the local PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'spend.db'}"
        return
    url = await create_pg_database()
    try:
        yield url
    finally:
        await drop_pg_database(url)


@asynccontextmanager
async def mcp_client(gateway_url: str, key: str) -> AsyncIterator[Any]:
    """The official MCP client (a ``ClientSession``), connected to the gateway's endpoint with
    a virtual key."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(f"{gateway_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session
