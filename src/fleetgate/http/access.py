"""Who may call an admin route, and where admin actions are recorded.

`AdminAccess` authenticates a request from its key headers (``Authorization``, and those a
compatibility feature adds) with the gateway's
current authenticator (the master key, then tenancy's key cache when tenancy is on) and records
admin actions in the admin audit log (tenancy's, when it is on).

Example::

    access = AdminAccess(lambda: core.auth)   # the authenticator chain (fleetgate.core)
    actor = access.master(request)           # 401 / 403 unless the master key
    await access.record(actor, "config.reload", "applied", {"generation": 3})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from fleetgate.contract.principal import Authenticator, Principal
from fleetgate.errors import PermissionDenied

__all__ = ["AdminAccess", "AdminAudit", "RequestAuthenticator"]


class RequestAuthenticator(Authenticator, Protocol):
    """An authenticator that also finds the key in request headers (`fleetgate.core.AuthChain`)."""

    def key_of(self, headers: Mapping[str, str]) -> str: ...


class AdminAudit(Protocol):
    """Records one admin action (``team_id``: the team it concerns, for team admins' view)."""

    async def record_admin(
        self, actor: Principal, action: str, target: str, detail: Any, *, team_id: str | None = None
    ) -> None: ...


class AdminAccess:
    """Authentication and audit for admin routes; ``audit`` is None when nothing records."""

    def __init__(
        self, authenticator: Callable[[], RequestAuthenticator], audit: AdminAudit | None = None
    ) -> None:
        self._authenticator = authenticator
        self.audit = audit

    def authenticated(self, request: web.Request) -> Principal:
        """The caller, whatever its role (401 for a missing or unknown key)."""
        authenticator = self._authenticator()
        return authenticator.authenticate(authenticator.key_of(request.headers))

    def presented_key(self, request: web.Request) -> str:
        """The key the caller presented (401 when none), as the chain reads it."""
        return self._authenticator().key_of(request.headers)

    def principal(self, request: web.Request) -> Principal:
        """The caller of a route that acts for it (files, batches, MCP tools, feedback): 401
        for a missing or unknown key, 403 for a role that may not call (a finance viewer)."""
        return self.authenticated(request).require("call")

    def spend_reader(self, request: web.Request) -> Principal:
        """The caller of a spend report: the master key, a team admin key (its team's) or a
        finance viewer key (every team's); 403 otherwise."""
        principal = self.authenticated(request)
        if not principal.may("spend"):
            raise PermissionDenied(
                "Spend reports need the master key, a team admin key or a finance viewer key."
            )
        return principal

    def master(self, request: web.Request) -> Principal:
        """The caller, who must hold the master key (403 otherwise)."""
        principal = self.authenticated(request)
        if not principal.is_master:
            raise PermissionDenied("This admin route needs the master key.")
        return principal

    def admin(self, request: web.Request) -> Principal:
        """The caller, who must hold the master key or a team admin key (403 otherwise)."""
        principal = self.authenticated(request)
        if not principal.may("manage"):
            raise PermissionDenied("Admin routes need the master key or a team admin key.")
        return principal

    async def record(self, actor: Principal, action: str, target: str, detail: Any) -> None:
        """Record an admin action when an audit log is configured (tenancy on)."""
        if self.audit is not None:
            await self.audit.record_admin(actor, action, target, detail)
