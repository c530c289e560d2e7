"""`ToolAccess`: which namespaced tools a caller may list and call (the allow-lists).

Patterns are shell globs (`fnmatch.fnmatchcase`) over namespaced names, e.g. ``search__*``.
The team's list is the ceiling and the key's list narrows it; a caller named in neither gets
``default_tools``; the master key gets every tool::

    access = ToolAccess(config.access, team_name=lambda team_id: "research")
    access.allows(principal, "search__web_search")  # True / False
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase

from fleetgate.contract.principal import Principal
from fleetgate.mcp.config import McpAccess

__all__ = ["ToolAccess"]


def _matches(patterns: Sequence[str], tool: str) -> bool:
    return any(fnmatchcase(tool, p) for p in patterns)


class ToolAccess:
    """The allow-lists of the ``mcp.access`` config (swapped whole on a reload)."""

    def __init__(
        self, config: McpAccess, team_name: Callable[[str], str | None] | None = None
    ) -> None:
        self.config = config
        self._team_name = team_name

    def _team_list(self, team_id: str | None) -> tuple[str, ...] | None:
        if team_id is None:
            return None
        teams = self.config.teams
        if team_id in teams:
            return teams[team_id]
        name = self._team_name(team_id) if self._team_name is not None else None
        return teams.get(name) if name is not None else None

    def allows(self, principal: Principal, tool: str) -> bool:
        """May ``principal`` list and call the namespaced ``tool``?"""
        if principal.is_master:
            return True
        team = self._team_list(principal.team_id)
        key = self.config.keys.get(principal.key_id)
        if team is None and key is None:
            return _matches(self.config.default_tools, tool)
        return (team is None or _matches(team, tool)) and (key is None or _matches(key, tool))
