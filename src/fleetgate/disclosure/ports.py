"""The port disclosure provides when it is on (`fleetgate.core.Port`)."""

from __future__ import annotations

from fleetgate.core import Port
from fleetgate.disclosure.current import Disclosures

__all__ = ["DISCLOSURE"]

DISCLOSURE: Port[Disclosures] = Port("disclosure")
"""Each alias's registered model name and filing number, current after a reload (the
console's models page reads it)."""
