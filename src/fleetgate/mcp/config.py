"""The ``mcp:`` section of the gateway config: the MCP gateway (`fleetgate.mcp`).

Example (YAML)::

    mcp:
      path: /mcp                       # the one streamable-HTTP endpoint clients connect to
      servers:
        search:                        # tools appear as ``search__<tool>``
          transport: http
          url: https://search.internal/mcp
          headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}   # stays in the gateway
          price_per_call_usd: 0.002
          tool_prices_usd: {deep_search: 0.02}
          rpm: 600                     # every caller together
        files:
          transport: stdio
          command: /usr/local/bin/files-mcp
          args: ["--root", "/srv/docs"]
          secret_env: {FILES_TOKEN: "${FILES_TOKEN}"}
      access:
        default_tools: []              # keys and teams named nowhere below: no tools
        teams: {research: ["search__*", "files__read_file"]}
        keys: {key_abc123: ["search__web_search"]}   # narrows its team's list
      key_rpm: 120                     # tool calls per key per minute (all servers)

Tool names are ``<server><separator><tool>``; MCP allows ``[A-Za-z0-9._-]`` in a tool name
(1 to 128 characters), so server names use the same characters and never the separator.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleetgate.config.sections import Section

__all__ = ["MCP_SECTION", "McpAccess", "McpConfig", "McpServerConfig"]

_SERVER_NAME = re.compile(r"^[A-Za-z0-9.-]{1,64}$")  # no "_": "__" stays unambiguous


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class McpServerConfig(_Model):
    """One upstream MCP server: how to reach it, what a call costs, how fast it may be used."""

    # `http` (streamable HTTP) or `stdio` (a program the gateway starts and talks to on
    # stdin/stdout)
    transport: Literal["http", "stdio"]
    url: str | None = None  # http: the server's streamable-HTTP endpoint
    headers: dict[str, str] = Field(default_factory=dict)  # http: sent upstream only
    command: str | None = None  # stdio: the program to start
    # `stdio`: its arguments
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)  # stdio: extra environment
    secret_env: dict[str, str] = Field(default_factory=dict)  # stdio: redacted in /admin/config
    # `stdio`: its working directory
    cwd: str | None = None
    # what one call costs, billed to the caller's key and team (spend rows, budgets)
    price_per_call_usd: float = Field(0.0, ge=0)
    tool_prices_usd: dict[str, float] = Field(default_factory=dict)  # by upstream tool name
    rpm: int | None = Field(None, ge=0)  # calls per minute to this server, every caller together
    # calls in flight to this server at once, every caller together
    max_parallel: int | None = Field(None, ge=0)
    # a call with no answer after this fails (JSON-RPC error -32001)
    call_timeout_s: float = Field(60.0, gt=0)
    # connecting and listing the tools (start-up waits for a server's first attempt, at most
    # this long, then goes on without it); also bounds each liveness re-list
    connect_timeout_s: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _check_transport(self) -> McpServerConfig:
        if self.transport == "http" and not self.url:
            raise ValueError("an http MCP server needs 'url'")
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio MCP server needs 'command'")
        if any(p < 0 for p in self.tool_prices_usd.values()):
            raise ValueError("tool_prices_usd must not be negative")
        return self

    def price_usd(self, tool: str) -> float:
        return self.tool_prices_usd.get(tool, self.price_per_call_usd)


class McpAccess(_Model):
    """Tool allow-lists: glob patterns over namespaced tool names (``search__*``).

    A team's list is the ceiling for its keys; a key's list narrows it. A caller whose key and
    team are both unlisted gets ``default_tools``. The master key may use every tool."""

    # tool patterns for callers whose key and team are in neither list below: by default, none
    default_tools: tuple[str, ...] = ()
    teams: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # by team id or name
    keys: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # by key id


class McpConfig(_Model):
    """The MCP gateway; off while ``servers`` is empty."""

    # the endpoint's path (a change needs a restart)
    path: str = "/mcp"
    # between server and tool in a tool's name; 1 to 4 of the characters MCP allows in tool names
    # (`A-Z a-z 0-9 .
    separator: str = "__"
    # the upstream MCP servers by name; the gateway is off while this is empty.
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # which tools each key and team may call
    access: McpAccess = McpAccess()
    key_rpm: int | None = Field(None, ge=0)  # tool calls per key per minute, all servers
    team_rpm: int | None = Field(None, ge=0)  # tool calls per team per minute, all servers
    reconnect_s: float = Field(2.0, gt=0)  # first wait before reconnecting a lost server
    ping_interval_s: float = Field(5.0, gt=0)  # how often a connected server is pinged
    max_result_chars: int = Field(200_000, gt=0)  # longest tool result text kept in the audit

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") != value or " " in value:
            raise ValueError("path must start with '/' and not end with one")
        return value

    @field_validator("separator")
    @classmethod
    def _check_separator(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,4}", value):
            raise ValueError("separator: 1 to 4 of the characters MCP allows in tool names")
        return value

    @model_validator(mode="after")
    def _check_servers(self) -> McpConfig:
        for name in self.servers:
            if not _SERVER_NAME.fullmatch(name) or self.separator in name:
                raise ValueError(
                    f"mcp server name {name!r}: 1 to 64 of A-Z a-z 0-9 . - "
                    f"and not the separator {self.separator!r}"
                )
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.servers)


MCP_SECTION = Section(
    "mcp",
    McpConfig,
    reload={
        "": "live",  # access lists, separator, per-key and per-team limits
        "path": "restart",
        "reconnect_s": "restart",
        "ping_interval_s": "restart",
        "servers.*": "restart",  # how a server is reached, its call timeout: set at start
        "servers.*.price_per_call_usd": "live",
        "servers.*.tool_prices_usd": "live",
        "servers.*.rpm": "live",
        "servers.*.max_parallel": "live",
    },
    presence_restart=("servers.*",),
)
"""The ``mcp`` section: the MCP gateway; off without servers."""
