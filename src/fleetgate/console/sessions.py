"""Console sessions: a random id in an HTTP-only cookie, the session itself in memory.

A session keeps the credential it was opened with (a virtual key, or the identity provider's
token) so that every page re-checks it: a revoked key ends its sessions at their next click.
Every state-changing request carries the session's CSRF token (synchronizer token pattern) in a
form field or the ``X-CSRF-Token`` header.

Sessions live in this process's memory (bounded, expiring): with several replicas, put the
console behind sticky sessions, or sign in again on another replica.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from fleetgate.tenancy.principal import Principal

__all__ = ["COOKIE", "LOGIN_COOKIE", "Session", "Sessions", "cookie_is_secure", "same_token"]

COOKIE = "fg_session"
LOGIN_COOKIE = "fg_login"  # double-submit CSRF token of the sign-in forms (no session yet)


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented CSRF token with the expected one."""
    return bool(given) and hmac.compare_digest(str(given).encode(), expected.encode())


@dataclass(slots=True)
class Session:
    id: str
    principal: Principal
    token: str  # the bearer credential: a virtual key or the IdP's access token
    via: Literal["key", "oidc"]
    name: str  # what the header shows: "master key", a key hint, an e-mail
    csrf: str
    expires_at: float


class Sessions:
    """Open sessions by id, oldest dropped first past ``limit``."""

    def __init__(
        self, ttl_s: float, limit: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self._clock = clock
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def open(
        self, principal: Principal, token: str, via: Literal["key", "oidc"], name: str
    ) -> Session:
        session = Session(
            id=secrets.token_urlsafe(32),
            principal=principal,
            token=token,
            via=via,
            name=name,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self.ttl_s,
        )
        self._by_id[session.id] = session
        while len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._by_id[session_id]
            return None
        return session

    def close(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._by_id)


def cookie_is_secure(request: web.Request, setting: bool | str) -> bool:
    """Whether cookies get the ``Secure`` flag: ``auto`` leaves it off only for plain HTTP to
    a loopback address (a developer's machine, where browsers refuse Secure cookies on IPs)."""
    if setting is True or setting is False:
        return setting
    if request.secure:
        return True
    host = (request.host or "").rsplit(":", 1)[0].strip("[]")
    return host not in ("127.0.0.1", "localhost", "::1")
