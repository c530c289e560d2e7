"""The ports safety provides when it is on (`fleetgate.core.Port`)."""

from __future__ import annotations

from fleetgate.core import Port
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.safety.sinks import AuditLog

__all__ = ["GUARDRAIL_EVENTS", "SAFETY"]

SAFETY: Port[SafetyRuntime] = Port("safety")
"""The input and output policy (MCP tool calls pass the same checks)."""

GUARDRAIL_EVENTS: Port[AuditLog] = Port("guardrail-events")
"""Where guardrail decisions are recorded (the console's guardrails page reads them)."""
