"""Checks of single request-body fields that several request formats share."""

from __future__ import annotations

from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["optional_array"]


def optional_array(value: Any, param: str) -> list[Any]:
    """``value`` when it is a list, ``[]`` when it is None (absent or null), else a 400 naming
    ``param`` (the field's path in the body: ``tools``, ``messages[2].tool_calls``)."""
    if value is None:
        return []
    if not isinstance(value, list):
        name = param.rsplit(".", 1)[-1]
        raise InvalidRequest(f"'{name}' must be an array", param=param)
    return value
