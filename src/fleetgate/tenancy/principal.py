"""Who is calling: the result of authentication, carried through the request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Principal", "Role"]

# finance_viewer: reads every team's spend, nothing else (the console's finance role)
Role = Literal["master", "team_admin", "finance_viewer", "user"]


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``allowed_aliases`` of ``None`` means every alias. ``team_id`` is ``None`` for the master
    key. Limits and budgets are enforced by ``limits/`` from the ids here.
    """

    key_id: str
    role: Role = "user"
    team_id: str | None = None
    user_id: str | None = None
    allowed_aliases: frozenset[str] | None = None
    tags: tuple[tuple[str, str], ...] = field(default=())
    # When the credential stops being valid (a JWT's ``exp``, ms since the epoch); what acts
    # for it later (a batch's lines) must stop then too. None: no expiry carried here.
    expires_ms: int | None = None

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    def may_use(self, alias: str) -> bool:
        return self.allowed_aliases is None or alias in self.allowed_aliases

    @property
    def owner(self) -> str:
        """Who owns this caller's own stored state (conversations) within its tenant.

        ``user:<id>`` for a virtual key bound to a user of its team (``fg_users``; the binding
        is checked when the key is made), ``jwt:<sub>`` or ``oidc:<sub>`` for a subject an
        identity provider vouched for, else ``key:<key id>``. The namespaces keep a key's
        binding from ever naming an identity provider's subject, and the other way round.
        """
        if self.user_id:
            source, sep, _ = self.key_id.partition(":")
            kind = source if sep and source in ("jwt", "oidc") else "user"
            return f"{kind}:{self.user_id}"
        return f"key:{self.key_id}"

    @property
    def tenant(self) -> str:
        """The isolation domain for caches and prefix indexes."""
        return self.team_id or self.key_id
