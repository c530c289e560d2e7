"""The MCP gateway as a gateway feature (``mcp:`` config section; docs/mcp.md).

Off while ``mcp.servers`` is empty. The SDK (extra ``mcp``) is imported only when servers are
configured, so a gateway without the extra starts as before. Routes: the MCP endpoint
(``mcp.path``, POST/GET/DELETE as the streamable-HTTP transport defines) and
``GET /admin/mcp/servers``. No stage of its own: a tool call is a request on the gateway's
request path and passes the same stages as a model call (`fleetgate.mcp.tool_path`); without
tenancy the MCP limits are counted in this process (`fleetgate.mcp.limits.LocalLimits`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import web

from fleetgate.api.path import REQUEST_PATH
from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.extras import require
from fleetgate.feature import BaseFeature
from fleetgate.mcp.config import MCP_SECTION
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy

if TYPE_CHECKING:
    from fleetgate.mcp.runtime import McpRuntime

__all__ = ["McpFeature"]


def _team_name(tenancy: Tenancy) -> Callable[[str], str | None]:
    def name(team_id: str) -> str | None:
        team = tenancy.cache.team(team_id)
        return team.name if team is not None else None

    return name


class McpFeature(BaseFeature):
    """``runtime``: the servers, the tool gateway and the endpoint."""

    name = "mcp"
    sections = (MCP_SECTION,)

    def __init__(self, runtime: McpRuntime) -> None:
        self.runtime = runtime

    @classmethod
    def build(cls, core: Core) -> McpFeature | None:
        """The feature, or None when no MCP server is configured. Tool calls run through the
        stages of `REQUEST_PATH` and are recorded as it records requests; `TENANCY` names
        teams for the allow-lists."""
        config = core.config
        if not MCP_SECTION.of(config).enabled:
            return None
        require("mcp", extra="mcp", purpose="the MCP gateway (mcp.servers)")
        from fleetgate.mcp.limits import LocalLimits
        from fleetgate.mcp.runtime import McpRuntime

        tenancy = core.ports.get(TENANCY)
        path = core.ports.require(REQUEST_PATH)
        runtime = McpRuntime(
            MCP_SECTION.of(config),
            request_id=core.request_ids.next,
            access=core.access,
            stages=path.stages,
            record=path.record,
            registry=core.metrics.registry,
            team_name=_team_name(tenancy) if tenancy is not None else None,
            limits=LocalLimits() if tenancy is None else None,
        )
        return cls(runtime)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        path = self.runtime.config.path
        return [
            web.route("*", path, self.runtime.handle),
            web.get("/admin/mcp/servers", self.runtime.servers),
        ]

    def reconfigure(self, config: GatewayConfig) -> None:
        self.runtime.reconfigure(MCP_SECTION.of(config))

    async def start(self) -> None:
        await self.runtime.start()

    async def aclose(self) -> None:
        await self.runtime.aclose()
