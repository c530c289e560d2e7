"""Tool allow-lists: the team's list is the ceiling, the key's narrows it."""

from __future__ import annotations

from fleetgate.contract.principal import Principal
from fleetgate.mcp.access import ToolAccess
from fleetgate.mcp.config import McpAccess

TOOLS = ["search__web", "search__news", "files__read", "files__delete"]


def allowed(access: ToolAccess, principal: Principal) -> list[str]:
    return [t for t in TOOLS if access.allows(principal, t)]


def test_team_list_is_the_ceiling_and_the_key_list_narrows_it() -> None:
    access = ToolAccess(
        McpAccess(
            teams={"t1": ("search__*", "files__read")},
            keys={"k-narrow": ("search__web", "files__delete")},
        )
    )
    member = Principal(key_id="k-any", team_id="t1")
    narrowed = Principal(key_id="k-narrow", team_id="t1")
    assert allowed(access, member) == ["search__web", "search__news", "files__read"]
    assert allowed(access, narrowed) == ["search__web"]  # files__delete: not in the team's


def test_a_key_list_alone_applies_without_a_team_list() -> None:
    access = ToolAccess(McpAccess(default_tools=("*",), keys={"k1": ("files__*",)}))
    assert allowed(access, Principal(key_id="k1", team_id="t9")) == ["files__read", "files__delete"]
    assert allowed(access, Principal(key_id="k2", team_id="t9")) == TOOLS  # the default


def test_unlisted_callers_get_the_default_which_is_nothing_unless_configured() -> None:
    assert allowed(ToolAccess(McpAccess()), Principal(key_id="k", team_id="t")) == []
    master = Principal(key_id="master", role="master")
    assert allowed(ToolAccess(McpAccess()), master) == TOOLS


def test_teams_may_be_named_by_name() -> None:
    access = ToolAccess(McpAccess(teams={"research": ("files__read",)}), lambda _id: "research")
    assert allowed(access, Principal(key_id="k", team_id="team-123")) == ["files__read"]
