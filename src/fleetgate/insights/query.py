"""The insights admin API's query parameters: the team a caller reads and UTC days."""

from __future__ import annotations

import datetime as dt

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.insights.business import day_of

__all__ = ["query_day", "team_scope"]


def team_scope(actor: Principal, asked: str | None) -> str | None:
    """The team ``actor`` reads: the master key the one ``asked`` (None: every team), a team
    admin key its own (asking for another is a 403)."""
    if actor.is_master:
        return asked or None
    if asked and asked != actor.team_id:
        raise PermissionDenied("A team admin key reads only its own team's insights.")
    return actor.team_id


def query_day(value: str | None, name: str, default: int) -> int:
    """The day number (`day_of`) of a ``YYYY-MM-DD`` parameter, ``default`` when absent."""
    if value is None:
        return default
    try:
        return day_of(dt.date.fromisoformat(value))
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a date YYYY-MM-DD.", param=name) from None
