"""The MCP gateway: one streamable-HTTP MCP endpoint over the configured MCP servers.

`fleetgate.mcp.feature.McpFeature` plugs it in; `fleetgate.mcp.config` is the ``mcp:`` section
(importable without the SDK); the rest needs the ``mcp`` extra. See docs/mcp.md.
"""
