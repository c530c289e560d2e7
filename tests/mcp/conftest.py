"""Fixtures of the MCP gateway tests: the two upstream servers and a gateway in front of them.

Starting an MCP server or a gateway (with its stdio server) costs seconds on a loaded machine,
so the "notes" HTTP server is shared by a module's tests (`notes`; a test that kills it takes
its own, `own_notes`), and the tests that need no config of their own share one gateway with
the default section (`shared`), each with keys of its own. Their tests run in the module's
event loop (``pytest.mark.asyncio(loop_scope="module")``).
"""

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
import pytest_asyncio

from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from tests.tenancy.support import (
    MASTER,
    PRICE,
    Gateway,
    database_for,
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


@asynccontextmanager
async def _running_notes() -> AsyncIterator[HttpUpstream]:
    upstream = HttpUpstream()
    try:
        await upstream.start()
        yield upstream
    finally:
        upstream.kill()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def notes() -> AsyncIterator[HttpUpstream]:
    """The "notes" server, shared by the module's tests (none may stop it)."""
    async with _running_notes() as upstream:
        yield upstream


@pytest_asyncio.fixture(loop_scope="module")
async def own_notes() -> AsyncIterator[HttpUpstream]:
    """A "notes" server of the test's own, which it may kill and start again."""
    async with _running_notes() as upstream:
        yield upstream


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
            "teams": {
                "research": ["notes__*", "files__*"],
                "narrow": ["notes__echo", "notes__review", "notes__notes://readme"],
                "budgeted": ["notes__*"],
            },
        },
        "ping_interval_s": 0.3,
        "reconnect_s": 0.2,
    }
    section.update(overrides)
    return section


def gateway_config(
    mcp: dict[str, Any],
    safety: bool = True,
    models_url: str = "http://127.0.0.1:9/v1",
    safety_section: dict[str, Any] | None = None,
) -> GatewayConfig:
    """``models_url``: the model alias ``tiny``'s upstream (by default none answers);
    ``safety_section``: a ``safety:`` section of the test's own instead of the default one."""
    data: dict[str, Any] = {
        "models": [
            {
                "alias": "tiny",
                "deployments": [
                    {"provider": "openai", "model": "tiny", "api_base": models_url, "price": PRICE}
                ],
            }
        ],
        "health": {"probe_interval_s": 30},
        "tenancy": {"spend_flush_interval_s": 0.05, "poll_interval_s": 0.2},
        "mcp": mcp,
    }
    if safety_section is not None:
        data["safety"] = safety_section
    elif safety:
        data["safety"] = {
            "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
            "policies": {"default": {"input": ["words", "pii"], "actions": {"pii": "mask"}}},
        }
    return GatewayConfig.model_validate(data)


StartGateway = Callable[..., Awaitable[Gateway]]


async def _start_gateway(
    stack: contextlib.AsyncExitStack,
    tmp_path: Path,
    mcp: dict[str, Any],
    safety: bool = True,
    database_url: str | None = None,
    redis_url: str | None = None,
    tenancy: bool = True,
    replica: str = "",
    redis_prefix: str | None = None,
    **options: Any,
) -> Gateway:
    """``replica``: a data directory of its own (a second replica of the same store);
    ``redis_prefix``: the Redis key prefix (shared by replicas), else one of its own."""
    settings = Settings(
        master_key=MASTER,
        data_dir=tmp_path / replica,
        database_url=database_url or f"sqlite:///{tmp_path / 'fleetgate.db'}",
        redis_url=redis_url,
        watch_config=False,
    )
    config = gateway_config(mcp, safety, **options)
    if not tenancy:
        off = config.tenancy.model_copy(update={"enabled": False})
        config = config.model_copy(update={"tenancy": off})
    if redis_url:  # a prefix of its own: counters never meet another test's
        prefix = redis_prefix or f"fgtest:mcp:{os.getpid()}:{os.urandom(4).hex()}:"
        section = config.tenancy.model_copy(update={"redis_prefix": prefix})
        config = config.model_copy(update={"tenancy": section})
    app = create_app(settings, config)
    url = await stack.enter_async_context(served(app))
    session = await stack.enter_async_context(aiohttp.ClientSession())
    gateway = Gateway(url, app, session)

    async def all_connected() -> bool:  # a loaded machine starts the stdio server slowly
        _, servers = await gateway.admin("GET", "/admin/mcp/servers")
        return all(s["connected"] for s in servers["data"])

    await wait_for(all_connected, timeout=30, interval=0.1)
    return gateway


class SharedGateway:
    """One gateway with the default ``mcp:`` section, shared by a module's tests: the teams
    of the access config exist once ("research" logs payloads); each test makes its own keys."""

    def __init__(self, gateway: Gateway, teams: dict[str, str]) -> None:
        self.gw = gateway
        self.teams = teams

    async def key(self, team: str, **fields: Any) -> tuple[str, str]:
        """A new key in ``team``: (key_id, key)."""
        status, key = await self.gw.admin(
            "POST", "/admin/keys", json={"team": self.teams[team], **fields}
        )
        assert status == 201, key
        return key["id"], key["key"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(
    notes: HttpUpstream, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SharedGateway]:
    async with contextlib.AsyncExitStack() as stack:
        gw = await _start_gateway(stack, tmp_path_factory.mktemp("mcp"), mcp_section(notes.url))
        teams = {}
        for name, fields in (("research", {"log_payloads": True}), ("narrow", {})):
            status, team = await gw.admin("POST", "/admin/teams", json={"name": name, **fields})
            assert status == 201, team
            teams[name] = team["id"]
        yield SharedGateway(gw, teams)


@pytest_asyncio.fixture(loop_scope="module")
async def start_gateway(tmp_path: Path) -> AsyncIterator[StartGateway]:
    """Start a gateway (tenancy on SQLite) for an ``mcp:`` section; closed at the end."""
    stack = contextlib.AsyncExitStack()

    async def start(
        mcp: dict[str, Any],
        safety: bool = True,
        database_url: str | None = None,
        redis_url: str | None = None,
        tenancy: bool = True,
        **options: Any,
    ) -> Gateway:
        """``options``: `gateway_config`'s ``models_url`` and ``safety_section``, and
        `_start_gateway`'s ``replica`` and ``redis_prefix``."""
        return await _start_gateway(
            stack, tmp_path, mcp, safety, database_url, redis_url, tenancy, **options
        )

    async with stack:
        yield start


@pytest_asyncio.fixture(params=["sqlite", "postgres"], loop_scope="module")
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store: SQLite, and a new database on the local PostgreSQL."""
    async with database_for(request.param, f"sqlite:///{tmp_path / 'spend.db'}") as url:
        yield url


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
