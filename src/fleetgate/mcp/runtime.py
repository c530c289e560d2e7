"""`McpRuntime`: the upstream connections, the `ToolGateway` and the MCP endpoint they serve.

The endpoint is the SDK's low-level `mcp.server.lowlevel.Server` (``tools/list``,
``tools/call``, ``prompts/list``, ``prompts/get``, ``resources/list`` and ``resources/read``
answered by the `ToolGateway`) behind its `StreamableHTTPSessionManager` in
stateless mode with JSON responses: every POST is served on its own, so any replica can answer
any request and no session state needs sharing. aiohttp authenticates the bearer key first
(401 with a JSON-RPC error body otherwise) and hands the principal to the handlers in the ASGI
scope (`fleetgate.mcp.asgi`)::

    rt = McpRuntime(MCP_SECTION.of(config), request_id=ids.next, access=access,
                    stages=lambda: gw.stages)   # the request path's stages
    await rt.start()          # connect the servers, start the session manager
    app.router.add_route("*", "/mcp", rt.handle)
    await rt.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import mcp.types as types
from aiohttp import web
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import GatewayRequest
from fleetgate.contract.stages import Stage
from fleetgate.errors import AuthenticationFailed, PermissionDenied
from fleetgate.http import AdminAccess
from fleetgate.mcp.asgi import serve_asgi
from fleetgate.mcp.config import McpConfig
from fleetgate.mcp.gateway import ToolGateway
from fleetgate.mcp.limits import LocalLimits
from fleetgate.mcp.metrics import ToolMetrics
from fleetgate.mcp.tool_path import ToolPath
from fleetgate.mcp.upstream import Upstream
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry

__all__ = ["PRINCIPAL", "McpRuntime"]

PRINCIPAL = "fleetgate.principal"  # the ASGI scope key the handlers read the caller from
_INVALID_REQUEST = -32600


def _version() -> str:
    try:
        return metadata.version("fleetgate")
    except metadata.PackageNotFoundError:
        return ""


def _principal(ctx: Any) -> Principal:
    scope = getattr(ctx.request, "scope", None)
    principal = scope.get(PRINCIPAL) if isinstance(scope, dict) else None
    if not isinstance(principal, Principal):
        raise MCPError(_INVALID_REQUEST, "Not authenticated.")
    return principal


def _rpc_error(status: int, code: int, message: str, **headers: str) -> web.Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


class McpRuntime:
    """See the module docstring."""

    def __init__(
        self,
        config: McpConfig,
        *,
        request_id: Callable[[], str],
        access: AdminAccess,
        stages: Callable[[], Sequence[Stage]],
        record: Callable[[GatewayRequest], None] | None = None,
        registry: Registry | None = None,
        team_name: Callable[[str], str | None] | None = None,
        limits: LocalLimits | None = None,
    ) -> None:
        """``stages()``: the request path's stages, which every call passes (read per call);
        ``record``: the path's metrics and logs of a finished request; ``limits``: the MCP
        limits counted in this process, first on the calls' path (only without tenancy,
        whose stage counts them otherwise)."""
        self.config = config
        self.access = access
        self.limits = limits
        self.upstreams = {
            name: Upstream(
                name, server, reconnect_s=config.reconnect_s, ping_interval_s=config.ping_interval_s
            )
            for name, server in config.servers.items()
        }
        metrics = None
        if registry is not None:
            metrics = ToolMetrics(
                registry, lambda: [(n, up.connected) for n, up in self.upstreams.items()]
            )

        def path_stages() -> Sequence[Stage]:
            return stages() if limits is None else (limits, *stages())

        path = ToolPath(
            path_stages,
            request_id=request_id,
            record=record,
            observe=metrics.record if metrics is not None else None,
        )
        self.gateway = ToolGateway(config, self.upstreams, path, team_name=team_name)
        self.server: Server[Any] = Server(
            "fleetgate",
            version=_version(),
            instructions="Tools and prompts of the MCP servers behind this gateway, named "
            f"<server>{config.separator}<name>, and their resources.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True)
        self._stop = asyncio.Event()
        self._manager_task: asyncio.Task[None] | None = None
        self._running = asyncio.Event()

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.gateway.list_tools(_principal(ctx)))

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await self.gateway.call(_principal(ctx), params.name, params.arguments)

    async def _list_prompts(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=self.gateway.list_prompts(_principal(ctx)))

    async def _get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        return await self.gateway.get_prompt(_principal(ctx), params.name, params.arguments)

    async def _list_resources(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=self.gateway.list_resources(_principal(ctx)))

    async def _read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await self.gateway.read_resource(_principal(ctx), str(params.uri))

    def reconfigure(self, config: McpConfig) -> None:
        self.config = config
        self.gateway.reconfigure(config)

    # -- HTTP --------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The MCP endpoint: authenticate, then the SDK's streamable-HTTP transport."""
        try:
            principal = self.access.principal(request)
        except AuthenticationFailed as exc:
            return _rpc_error(401, _INVALID_REQUEST, exc.message, **{"WWW-Authenticate": "Bearer"})
        if request.method == "GET":
            # Stateless: the server never sends on its own, so it offers no GET stream (the
            # spec's 405), rather than an SSE stream per client held open with nothing on it.
            return _rpc_error(405, _INVALID_REQUEST, "Method not allowed.", Allow="POST, DELETE")
        if not self._running.is_set():
            return _rpc_error(503, -32603, "The MCP gateway is starting.", **{"Retry-After": "1"})
        return await serve_asgi(self.manager.handle_request, request, {PRINCIPAL: principal})

    async def servers(self, request: web.Request) -> web.Response:
        """``GET /admin/mcp/servers`` (master key): each server's state, never its credentials."""
        try:
            self.access.master(request)
        except (AuthenticationFailed, PermissionDenied) as exc:
            return web.json_response({"error": {"message": exc.message}}, status=exc.status)
        out = [
            {
                "name": name,
                "transport": up.config.transport,
                "connected": up.connected,
                "tools": [self.gateway.tool_name(name, t.name) for t in up.tools],
                "prompts": [self.gateway.tool_name(name, p.name) for p in up.prompts],
                "resources": len(up.resources),
                "last_error": up.last_error,
            }
            for name, up in self.upstreams.items()
        ]
        return web.json_response({"data": out})

    # -- lifecycle ---------------------------------------------------------------------------

    async def _serve_manager(self) -> None:
        async with self.manager.run():
            self._running.set()
            await self._stop.wait()

    async def start(self) -> None:
        """Start the session manager and connect every server: waits for each server's first
        attempt (at most its ``connect_timeout_s``), so the first ``tools/list`` is complete;
        a server that refused or is still down is retried in the background."""
        self._manager_task = asyncio.get_running_loop().create_task(
            self._serve_manager(), name="fg-mcp-sessions"
        )
        for upstream in self.upstreams.values():
            await upstream.start()
        waits = [up.wait_connected(up.config.connect_timeout_s) for up in self.upstreams.values()]
        await asyncio.gather(*waits, self._running.wait())

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()
        self._stop.set()
        if self._manager_task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._manager_task), 5.0)
        await cancel_and_wait(self._manager_task)
        if self.limits is not None:
            await self.limits.drain()
