"""The port insights provides when it is on (`fleetgate.core.Port`)."""

from __future__ import annotations

from fleetgate.core import Port
from fleetgate.insights.reports import InsightsReports

__all__ = ["INSIGHTS"]

INSIGHTS: Port[InsightsReports] = Port("insights")
"""Business, quality and key reports and the review queue (the console's insights pages)."""
