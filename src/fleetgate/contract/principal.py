"""Who is calling: the result of authentication, carried through the request.

`Principal` is what every entry point acts for; an `Authenticator` turns the key a client
presents (`bearer_token`) into one. The authenticators themselves (the master key, tenancy's
key cache, JWTs) live in the features that own them; this module is the contract they share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

from fleetgate.errors import AuthenticationFailed, PermissionDenied

__all__ = ["ROLE_ACTIONS", "Action", "Authenticator", "Principal", "Role", "bearer_token"]

# finance_viewer: reads every team's spend, nothing else (the console's finance role)
Role = Literal["master", "team_admin", "finance_viewer", "user"]

# What a role may do, the one table every entry point asks (through `Principal.may`):
#   call       models, MCP tools, files, batches, stored responses, feedback
#   spend      its own team's spend reports
#   spend_all  every team's spend reports
#   manage     the admin API (a team admin only its own team: each service checks that)
# tests/tenancy/test_roles.py calls each route group as each role against this table.
Action = Literal["call", "spend", "spend_all", "manage"]
ROLE_ACTIONS: Mapping[str, frozenset[Action]] = MappingProxyType({
    "master": frozenset({"call", "spend", "spend_all", "manage"}),
    "team_admin": frozenset({"call", "spend", "manage"}),
    "finance_viewer": frozenset({"spend", "spend_all"}),
    "user": frozenset({"call"}),
})  # fmt: skip


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

    def may(self, action: Action) -> bool:
        """Whether this caller's role allows ``action`` (`ROLE_ACTIONS`)."""
        return action in ROLE_ACTIONS.get(self.role, ())

    def require(self, action: Action) -> Principal:
        """This caller, or a 403 when its role does not allow ``action``."""
        if not self.may(action):
            what = "call models or tools" if action == "call" else f"do this ({action})"
            raise PermissionDenied(f"A {self.role} key may not {what}.")
        return self

    def may_use(self, alias: str) -> bool:
        """Whether this caller may call ``alias`` (a role that may not call: no alias)."""
        if not self.may("call"):
            return False
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


class Authenticator(Protocol):
    """Turns a presented key into a principal; must answer from memory (hot path)."""

    def authenticate(self, token: str) -> Principal: ...


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer ...`` header, or raise 401."""
    if not header:
        raise AuthenticationFailed(
            "Missing API key: send 'Authorization: Bearer <key>'.", code="missing_api_key"
        )
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <key>'.")
    return token
