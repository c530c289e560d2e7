"""Fleetgate errors -> Anthropic error bodies, for the ``/v1/messages`` front door.

Anthropic SDK clients expect ``{"type": "error", "error": {"type", "message"}}`` with the
documented error types (``fleetgate.providers.anthropic.wire``), in the body of an error answer
or, after a stream began, as an ``error`` event.
"""

from __future__ import annotations

from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.providers.anthropic.wire import ANTHROPIC_ERROR_STATUS, error_type_for_status

__all__ = ["anthropic_error_body", "fleetgate_error_to_anthropic"]


def anthropic_error_body(status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    """An Anthropic-shaped error body (``kind`` defaults to the type of ``status``)."""
    return {
        "type": "error",
        "error": {"type": kind or error_type_for_status(status), "message": message},
    }


def fleetgate_error_to_anthropic(err: FleetgateError) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` rendering a fleetgate error in Anthropic's shape."""
    obj = err.to_dict()["error"]
    kind = obj.get("type")
    known = kind if isinstance(kind, str) and kind in ANTHROPIC_ERROR_STATUS else None
    return err.status, anthropic_error_body(err.status, str(obj.get("message")), known)
