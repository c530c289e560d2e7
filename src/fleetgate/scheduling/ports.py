"""The port scheduling provides when it is on (`fleetgate.core.Port`)."""

from __future__ import annotations

from fleetgate.core import Port
from fleetgate.scheduling.scheduler import Scheduler

__all__ = ["SCHEDULER"]

SCHEDULER: Port[Scheduler] = Port("scheduler")
"""Admission queues (batch lines queue as batch work; the console's queues page)."""
