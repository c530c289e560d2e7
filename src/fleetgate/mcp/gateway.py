"""`ToolGateway`: the aggregated tools, prompts and resources of every upstream, and the
calls to them.

``list_tools(principal)`` / ``list_prompts``: the namespaced tools and prompts
(``<server>__<name>``) of the connected servers that the caller's allow-lists admit;
``list_resources``: their resources, under their own URIs (the allow-lists see them as
``<server>__<uri>``; a URI two servers both list belongs to the first in the config).
``call(principal, name, arguments)`` (and ``get_prompt``, ``read_resource``, the same way) is
a request on the gateway's request path, through the same stages as a model call: limits,
budgets, safety checks, spend and audit (`fleetgate.mcp.tool_path`). Prompts and resources
are not priced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mcp.types as types
from mcp.shared.tool_name_validation import TOOL_NAME_REGEX

from fleetgate.contract.principal import Principal
from fleetgate.contract.tool import ToolKind
from fleetgate.mcp.access import ToolAccess
from fleetgate.mcp.config import McpConfig, McpServerConfig
from fleetgate.mcp.screen import PROMPT, RESOURCE, TOOL
from fleetgate.mcp.tool_path import Target, ToolPath
from fleetgate.mcp.upstream import Upstream

__all__ = ["ToolGateway"]


class ToolGateway:
    """Aggregation and access for MCP tools; calls go down the request path (module doc).

    ``team_name(team_id)``: a team's name, so allow-lists may name teams either way."""

    def __init__(
        self,
        config: McpConfig,
        upstreams: Mapping[str, Upstream],
        path: ToolPath,
        *,
        team_name: Callable[[str], str | None] | None = None,
    ) -> None:
        self.config = config
        self.upstreams = dict(upstreams)
        self.path = path
        self._team_name = team_name
        self.access = ToolAccess(config.access, team_name)

    def reconfigure(self, config: McpConfig) -> None:
        """A reloaded ``mcp:`` section: access, limits and prices at once; servers themselves
        (added, removed, moved) at the next restart."""
        self.config = config
        self.access = ToolAccess(config.access, self._team_name)

    # -- listing -----------------------------------------------------------------------------

    def tool_name(self, server: str, tool: str) -> str:
        return f"{server}{self.config.separator}{tool}"

    def _listed(self, principal: Principal, items: Callable[[Upstream], list[Any]]) -> list[Any]:
        """The named items (tools, prompts) of each server that ``principal`` may use, renamed."""
        out: list[Any] = []
        for server, upstream in self.upstreams.items():
            for item in list(items(upstream)):
                name = self.tool_name(server, item.name)
                if TOOL_NAME_REGEX.fullmatch(name) and self.access.allows(principal, name):
                    out.append(item.model_copy(update={"name": name}))
        return out

    def list_tools(self, principal: Principal) -> list[types.Tool]:
        """The namespaced tools of the connected servers that ``principal`` may use."""
        return self._listed(principal, lambda up: up.tools)

    def list_prompts(self, principal: Principal) -> list[types.Prompt]:
        """The namespaced prompts of the connected servers that ``principal`` may use."""
        return self._listed(principal, lambda up: up.prompts)

    def list_resources(self, principal: Principal) -> list[types.Resource]:
        """The resources of the connected servers that ``principal`` may read (own URIs)."""
        out: list[types.Resource] = []
        seen: set[str] = set()
        for server, upstream in self.upstreams.items():
            for resource in list(upstream.resources):
                uri = str(resource.uri)
                if uri not in seen and self.access.allows(principal, self.tool_name(server, uri)):
                    seen.add(uri)
                    out.append(resource)
        return out

    def _server_config(self, server: str, upstream: Upstream) -> McpServerConfig:
        """The server's prices and limits as reloaded (its connection keeps the started one)."""
        return self.config.servers.get(server, upstream.config)

    def _target(self, principal: Principal, kind: ToolKind, name: str) -> Target | None:
        """The server and own name ``name`` resolves to (resources by URI), and whether the
        caller may use it; None for a name no connected server has."""
        if kind == "resource":
            owner = next(
                (
                    (server, up)
                    for server, up in self.upstreams.items()
                    if any(str(r.uri) == name for r in up.resources)
                ),
                None,
            )
            if owner is None:
                return None
            server, upstream = owner
            own, allowed_as = name, self.tool_name(server, name)
        else:
            server, sep, own = name.partition(self.config.separator)
            found = self.upstreams.get(server)
            if not sep or not own or found is None:
                return None
            upstream, allowed_as = found, name
        config = self._server_config(server, upstream)
        return Target(server, config, own, self.access.allows(principal, allowed_as), upstream)

    async def call(
        self, principal: Principal, name: str, arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        """One tool call through the gateway (module docstring); raises `MCPError` for what
        the caller gets as a JSON-RPC error."""
        args = arguments or {}
        return await self.path.run(
            self.config, principal, "tool", name, args, self._target(principal, "tool", name),
            lambda up, own: up.call(own, args), TOOL,
        )  # fmt: skip

    async def get_prompt(
        self, principal: Principal, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        """``prompts/get`` through the gateway, as a tool call but not priced."""
        args = dict(arguments or {})
        return await self.path.run(
            self.config, principal, "prompt", name, dict(args),
            self._target(principal, "prompt", name),
            lambda up, own: up.get_prompt(own, dict(args)), PROMPT,
        )  # fmt: skip

    async def read_resource(self, principal: Principal, uri: str) -> types.ReadResourceResult:
        """``resources/read`` through the gateway, as a tool call but not priced."""
        return await self.path.run(
            self.config, principal, "resource", uri, {}, self._target(principal, "resource", uri),
            lambda up, own: up.read_resource(own), RESOURCE,
        )  # fmt: skip
