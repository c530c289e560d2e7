"""The port tenancy provides when it is on (`fleetgate.core.Port`)."""

from __future__ import annotations

from fleetgate.core import Port
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["TENANCY"]

TENANCY: Port[Tenancy] = Port("tenancy")
"""Keys, limits, budgets, the spend writer and the tenancy database (safety, console, batches,
MCP, the dispatcher's fallback limits)."""
