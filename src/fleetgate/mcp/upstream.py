"""`Upstream`: one configured MCP server, kept connected by a task of its own.

The SDK's transports and `mcp.ClientSession` are async context managers whose task groups must
be entered and left by one task, so each server gets a task that connects (``http``: streamable
HTTP with the configured headers; ``stdio``: the configured command as a subprocess),
initializes, lists the tools (and the prompts and resources of a server that offers them),
then lists them again every ``ping_interval_s`` (a liveness check that also follows changes).
A failure (the process died, the server went away, a call broke the connection) drops the
session and what it listed and reconnects with a doubling wait::

    up = Upstream("search", server_config, reconnect_s=2.0, ping_interval_s=5.0)
    await up.start()
    up.tools            # the server's tools while connected, else [] (also .prompts, .resources)
    result = await up.call("web_search", {"q": "..."})
    prompt = await up.get_prompt("summarise", {"topic": "..."})
    page = await up.read_resource("docs://readme")
    await up.aclose()

Credentials (headers, ``secret_env``) go only to the server; nothing here returns them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import httpx2
import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from fleetgate.mcp.config import McpServerConfig
from fleetgate.tasks import Background, RunsInBackground

__all__ = ["Upstream", "UpstreamUnavailable"]

log = logging.getLogger("fleetgate.mcp")

_MAX_WAIT_S = 30.0
_MAX_PAGES = 50  # list pages (tools, prompts, resources) read from one server
T = TypeVar("T")


class UpstreamUnavailable(Exception):
    """The server is not connected, or the connection broke during the call."""


class Upstream(RunsInBackground):
    """One upstream MCP server (see the module docstring)."""

    def __init__(
        self, name: str, config: McpServerConfig, *, reconnect_s: float, ping_interval_s: float
    ) -> None:
        self.name = name
        self.config = config
        self.reconnect_s = reconnect_s
        self.ping_interval_s = ping_interval_s
        self.tools: list[types.Tool] = []
        self.prompts: list[types.Prompt] = []
        self.resources: list[types.Resource] = []
        self.last_error: str | None = None
        self._session: ClientSession | None = None
        self._lost = asyncio.Event()
        self._connected = asyncio.Event()
        self._failed = asyncio.Event()  # an attempt to connect failed (start-up stops waiting)
        self._task = Background(self._run, name=f"fg-mcp-{name}")

    @property
    def connected(self) -> bool:
        """Holding a session that no call has found broken."""
        return self._session is not None and not self._lost.is_set()

    async def wait_connected(self, timeout_s: float) -> bool:
        """Wait (start-up) until the first attempt to connect has ended, at most ``timeout_s``:
        True when connected. A server that refuses at once is not waited for (the background
        retries go on)."""
        waits = [asyncio.ensure_future(e.wait()) for e in (self._connected, self._failed)]
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return self.connected

    async def aclose(self) -> None:
        await super().aclose()
        self._session = None
        self._forget()

    def _forget(self) -> None:
        self.tools, self.prompts, self.resources = [], [], []

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool``; `UpstreamUnavailable` when not connected or the connection broke,
        `TimeoutError` past ``call_timeout_s``, `mcp.shared.exceptions.MCPError` for the
        server's own JSON-RPC errors."""
        return await self._request(lambda session: session.call_tool(tool, arguments))

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> types.GetPromptResult:
        """``prompts/get``; fails as `call` does."""
        return await self._request(lambda session: session.get_prompt(name, arguments))

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """``resources/read``; fails as `call` does."""
        return await self._request(lambda session: session.read_resource(uri))

    async def _request(self, send: Callable[[ClientSession], Awaitable[T]]) -> T:
        session = self._session
        if session is None or self._lost.is_set():
            raise UpstreamUnavailable(f"MCP server {self.name!r} is not connected")
        try:
            async with asyncio.timeout(self.config.call_timeout_s):
                return await send(session)
        except TimeoutError:
            raise
        except MCPError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                raise TimeoutError from None
            if exc.error.code != CONNECTION_CLOSED:
                raise  # the server's own answer
            self._lost.set()
            raise UpstreamUnavailable(f"MCP server {self.name!r}: the connection closed") from exc
        except Exception as exc:
            self._lost.set()
            raise UpstreamUnavailable(f"MCP server {self.name!r}: the connection broke") from exc

    # -- the connection task -----------------------------------------------------------------

    async def _run(self) -> None:
        wait = self.reconnect_s
        while True:
            try:
                await self._serve_one_connection()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # often an ExceptionGroup from a transport's task group
                if self._connected.is_set():  # it was up: start the backoff afresh
                    wait = self.reconnect_s
                self.last_error = _describe(exc)
                self._failed.set()
                log.warning(
                    "MCP server %s: %s; reconnecting in %.1fs", self.name, self.last_error, wait
                )
            self._session = None
            self._forget()
            self._connected.clear()
            await asyncio.sleep(wait)
            wait = min(wait * 2, _MAX_WAIT_S)

    async def _serve_one_connection(self) -> None:
        async with AsyncExitStack() as stack:
            async with asyncio.timeout(self.config.connect_timeout_s):
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                caps = (await session.initialize()).capabilities
                listed = await self._list(session, caps)
            self._lost.clear()
            self._session = session  # callable before its tools are shown, never after
            self.tools, self.prompts, self.resources = listed
            self.last_error = None
            self._connected.set()
            log.info("MCP server %s connected: %d tools", self.name, len(self.tools))
            while not self._lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._lost.wait(), self.ping_interval_s)
                    break  # a call found the connection broken
                async with asyncio.timeout(self.config.connect_timeout_s):
                    self.tools, self.prompts, self.resources = await self._list(session, caps)
            self._session = None
            raise UpstreamUnavailable("the connection broke during a call")

    async def _list(
        self, session: ClientSession, caps: types.ServerCapabilities
    ) -> tuple[list[types.Tool], list[types.Prompt], list[types.Resource]]:
        """Tools, and the prompts and resources when the server offers them."""
        tools = await _pages(session.list_tools, "tools")
        prompts = await _pages(session.list_prompts, "prompts") if caps.prompts else []
        resources = await _pages(session.list_resources, "resources") if caps.resources else []
        return tools, prompts, resources

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        if cfg.transport == "http":
            assert cfg.url is not None
            timeout = httpx2.Timeout(cfg.connect_timeout_s, read=cfg.call_timeout_s + 5)
            async with (
                httpx2.AsyncClient(headers=dict(cfg.headers), timeout=timeout) as client,
                streamable_http_client(cfg.url, http_client=client) as streams,
            ):
                yield streams[0], streams[1]
            return
        assert cfg.command is not None
        params = StdioServerParameters(
            command=cfg.command,
            args=list(cfg.args),
            env={**os.environ, **cfg.env, **cfg.secret_env},
            cwd=cfg.cwd,
        )
        with open(os.devnull, "w") as errlog:  # the server's stderr is its own business
            async with stdio_client(params, errlog=errlog) as streams:
                yield streams[0], streams[1]


async def _pages(fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated ``*/list`` (up to ``_MAX_PAGES`` pages)."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await fetch(params=params)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


def _describe(exc: BaseException) -> str:
    """A one-line reason, from the first leaf of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]
