"""Prometheus metrics of the MCP gateway (on the gateway's ``/metrics``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetgate.telemetry.registry import Registry

__all__ = ["ToolMetrics"]


class ToolMetrics:
    """Calls by server and decision, their duration, and which servers are connected."""

    def __init__(
        self, registry: Registry, servers: Callable[[], Iterable[tuple[str, bool]]]
    ) -> None:
        """``servers``: (name, connected) of every configured server, read when scraped."""
        self.calls = registry.counter(
            "fleetgate_mcp_tool_calls_total",
            "MCP tool calls by server and decision (allowed, masked, blocked, refused_<reason>, "
            "error, cancelled).",
            ("server", "decision"),
        )
        self.duration = registry.histogram(
            "fleetgate_mcp_tool_call_duration_seconds",
            "Duration of MCP tool calls that reached the server, the gateway's checks included.",
            ("server",),
        )
        connected = registry.gauge(
            "fleetgate_mcp_server_connected",
            "1 while the gateway holds a connection to the MCP server, else 0.",
            ("server",),
        )
        connected.set_collector(lambda: [((name,), float(up)) for name, up in servers()])

    def record(self, server: str, decision: str, duration_s: float | None) -> None:
        self.calls.labels(server, decision).inc()
        if duration_s is not None:
            self.duration.labels(server).observe(duration_s)
