"""`Upstream` on its own: a stdio server connected, called, lost and started again."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("mcp")  # the `mcp` extra

from mcp.shared.exceptions import MCPError

from fleetgate.mcp.config import McpServerConfig
from fleetgate.mcp.upstream import Upstream, UpstreamUnavailable
from tests.mcp.conftest import FILES_TOKEN, UPSTREAMS


def stdio_config(**extra: object) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "transport": "stdio",
            "command": sys.executable,
            "args": [UPSTREAMS, "stdio"],
            "secret_env": {"FILES_TOKEN": FILES_TOKEN},
            "connect_timeout_s": 30,
            **extra,
        }
    )


@pytest.fixture
async def files() -> AsyncIterator[Upstream]:
    upstream = Upstream("files", stdio_config(), reconnect_s=0.1, ping_interval_s=0.2)
    await upstream.start()
    try:
        assert await upstream.wait_connected(30)
        yield upstream
    finally:
        await upstream.aclose()


async def test_a_stdio_server_that_exits_is_started_again(files: Upstream) -> None:
    assert {"echo", "crash", "sleep"} <= {t.name for t in files.tools}
    with pytest.raises(UpstreamUnavailable):
        await files.call("crash", {})
    for _ in range(300):  # bounded: 30 s for a new process to start and answer
        if files.connected:
            break
        await asyncio.sleep(0.1)
    result = await files.call("echo", {"text": "again"})
    assert result.content[0].text == "files: again"  # type: ignore[union-attr]


async def test_the_servers_own_errors_keep_the_connection(files: Upstream) -> None:
    with pytest.raises(MCPError):
        await files.call("debug_auth", {})
    assert files.connected
    assert (await files.call("add", {"a": 1, "b": 2})).structured_content == {"result": 3}


async def test_a_server_that_cannot_start_is_retried_and_reported() -> None:
    broken = stdio_config(secret_env={}, connect_timeout_s=10)  # exits: no FILES_TOKEN
    upstream = Upstream("files", broken, reconnect_s=0.1, ping_interval_s=0.2)
    await upstream.start()
    try:
        for _ in range(300):  # bounded: 30 s (the process starts, then exits)
            if upstream.last_error:
                break
            await asyncio.sleep(0.1)
        assert upstream.last_error and not upstream.tools and not upstream.connected
        with pytest.raises(UpstreamUnavailable):
            await upstream.call("echo", {"text": "x"})
    finally:
        await upstream.aclose()


async def test_prompts_and_resources_are_listed_and_served(files: Upstream) -> None:
    assert {p.name for p in files.prompts} == {"review", "poisoned"}
    assert {str(r.uri) for r in files.resources} == {"files://readme", "files://poisoned"}
    got = await files.get_prompt("review", {"topic": "x"})
    assert got.messages[0].content.text == "files: review x carefully."  # type: ignore[union-attr]
    page = await files.read_resource("files://readme")
    assert page.contents[0].text.startswith("files readme")  # type: ignore[union-attr]
    with pytest.raises(MCPError):  # the server's own error, the connection kept
        await files.read_resource("files://nothing-here")
    assert files.connected


async def test_start_up_does_not_wait_out_the_timeout_for_a_server_that_refuses() -> None:
    """A server that refuses the connection at once is not waited for until its
    ``connect_timeout_s``: start-up goes on after the failed attempt, and the background
    retries go on."""
    config = McpServerConfig.model_validate(
        {"transport": "http", "url": "http://127.0.0.1:9/mcp", "connect_timeout_s": 20}
    )
    upstream = Upstream("down", config, reconnect_s=30, ping_interval_s=30)
    await upstream.start()
    try:
        began = asyncio.get_running_loop().time()
        assert not await upstream.wait_connected(config.connect_timeout_s)
        assert asyncio.get_running_loop().time() - began < 5.0
        assert upstream.last_error is not None
    finally:
        await upstream.aclose()
