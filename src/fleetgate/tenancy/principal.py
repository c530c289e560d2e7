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

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    def may_use(self, alias: str) -> bool:
        return self.allowed_aliases is None or alias in self.allowed_aliases

    @property
    def tenant(self) -> str:
        """The isolation domain for caches and prefix indexes."""
        return self.team_id or self.key_id
