"""Names where people think in names: a team's name, a key's owner, with the id on hover.

Every page shows a team or a key the same way, ``<span title="team_dd50…">search</span>``,
from the key cache's snapshot (in memory: no query). Traffic of the master key (no team, key
``master``) reads "master key", never a blank or "(none)"; an id the cache no longer knows (a
revoked key, a deleted team) is shown as the id itself.

Example::

    names = Names(tenancy.cache.snapshot)
    names.team("team_dd50")     # Markup('<span class="named" title="team_dd50">search</span>')
"""

from __future__ import annotations

from markupsafe import Markup, escape

from fleetgate.tenancy.cache import Snapshot

__all__ = ["MASTER_KEY", "Names"]

MASTER_KEY = "master key"


def _named(name: str, ident: str) -> Markup:
    return Markup('<span class="named" title="{}">{}</span>').format(ident, name)


class Names:
    """Team and key names from one snapshot of the key cache."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def team_name(self, team_id: str | None) -> str:
        """Plain text: the team's name, "master key" for none, the id for an unknown team."""
        if not team_id or team_id == "master":  # the scheduler's tenant of master-key traffic
            return MASTER_KEY
        team = self._snapshot.teams.get(team_id)
        return team.name if team is not None else team_id

    def key_name(self, key_id: str | None) -> str:
        """Plain text: ``alice (search)`` for a key bound to a user, ``search key …ab12``
        otherwise; "master key" for the master key; the id for a key no longer live."""
        if not key_id or key_id == "master":
            return MASTER_KEY
        entry = self._snapshot.by_id.get(key_id)
        if entry is None:
            return key_id
        team = entry.team.name
        user = entry.principal.user_id
        return f"{user} ({team})" if user else f"{team} key …{key_id[-4:]}"

    def team(self, team_id: str | None) -> Markup:
        if not team_id or team_id == "master":
            return Markup(MASTER_KEY)
        return _named(self.team_name(team_id), team_id)

    def key(self, key_id: str | None) -> Markup:
        if not key_id or key_id == "master":
            return Markup(MASTER_KEY)
        return _named(self.key_name(key_id), key_id)

    def group(self, group: str, value: str | None, team_name: str | None = None) -> Markup:
        """A spend report's group value as shown: teams and keys by name, the rest as is."""
        if group == "team":
            return self.team(value) if team_name is None else _named(team_name, str(value))
        if group == "key":
            return self.key(value)
        return Markup(escape(value)) if value else Markup(escape(f"(no {group})"))
