"""Console sessions: a random id in an HTTP-only cookie, the session itself in the database,
so that every replica behind a load balancer knows it (no sticky sessions needed) and a sign-out
on one replica ends it on all of them.

A session keeps the credential it was opened with (a virtual key, or the identity provider's
token) so that every page re-checks it: a revoked key ends its sessions at their next click.
Every state-changing request carries the session's CSRF token (synchronizer token pattern) in a
form field or the ``X-CSRF-Token`` header.

What the database holds (``fg_console_sessions``) is no use without the cookie: the row's key
is the SHA-256 of the session id, and the credential is sealed (AES-GCM) with a key derived
from the id, so reading the table neither opens a session nor reveals a key or token. Sessions
expire ``ttl_s`` after sign-in (wall clock, the same on every replica); past ``limit`` open
sessions the oldest are dropped. Each console request costs one primary-key read.

Example::

    sessions = Sessions(db, ttl_s=8 * 3600, limit=10_000)
    session = await sessions.open(principal, key, "key", "team admin key_1")
    same = await sessions.get(session.id)      # on any replica
    await sessions.close(session.id)           # ends it everywhere
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import delete, func, select

from fleetgate.store.database import Database
from fleetgate.store.tables import console_sessions
from fleetgate.tenancy.principal import Principal

__all__ = ["COOKIE", "LOGIN_COOKIE", "Session", "Sessions", "cookie_is_secure", "same_token"]

COOKIE = "fg_session"
LOGIN_COOKIE = "fg_login"  # double-submit CSRF token of the sign-in forms (no session yet)
_VIA = ("key", "oidc")


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
    expires_ms: int


def _id_hash(session_id: str) -> str:
    return hashlib.sha256(b"fleetgate-session-id:" + session_id.encode()).hexdigest()


def _sealing_key(session_id: str) -> bytes:
    return hashlib.sha256(b"fleetgate-session-token:" + session_id.encode()).digest()


def _seal(session_id: str, token: str) -> bytes:
    nonce = os.urandom(12)
    return nonce + AESGCM(_sealing_key(session_id)).encrypt(nonce, token.encode(), None)


def _unseal(session_id: str, sealed: bytes) -> str | None:
    try:
        plain = AESGCM(_sealing_key(session_id)).decrypt(sealed[:12], sealed[12:], None)
    except (InvalidTag, ValueError):
        return None
    return plain.decode()


def _principal_fields(p: Principal) -> dict[str, Any]:
    return {
        "key_id": p.key_id, "user_id": p.user_id,
        "allowed_aliases": None if p.allowed_aliases is None else sorted(p.allowed_aliases),
        "tags": [list(t) for t in p.tags],
    }  # fmt: skip


def _principal(role: str, team_id: str | None, fields: dict[str, Any]) -> Principal:
    aliases = fields.get("allowed_aliases")
    return Principal(
        key_id=str(fields["key_id"]),
        role=role,  # type: ignore[arg-type]
        team_id=team_id,
        user_id=fields.get("user_id"),
        allowed_aliases=None if aliases is None else frozenset(aliases),
        tags=tuple((str(k), str(v)) for k, v in fields.get("tags") or ()),
    )


class Sessions:
    """Open sessions in the database, oldest dropped first past ``limit``."""

    def __init__(
        self,
        db: Database,
        ttl_s: float,
        limit: int,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.limit = limit
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def open(
        self, principal: Principal, token: str, via: Literal["key", "oidc"], name: str
    ) -> Session:
        now = self._now_ms()
        session = Session(
            id=secrets.token_urlsafe(32),
            principal=principal,
            token=token,
            via=via,
            name=name[:200],
            csrf=secrets.token_urlsafe(32),
            expires_ms=now + int(self.ttl_s * 1000),
        )
        row = {
            "id_hash": _id_hash(session.id), "via": via, "role": principal.role,
            "team_id": principal.team_id, "principal": _principal_fields(principal),
            "name": session.name, "csrf": session.csrf,
            "sealed_token": _seal(session.id, token), "created_ms": now,
            "expires_ms": session.expires_ms,
        }  # fmt: skip
        t = console_sessions.c
        async with self.db.engine.begin() as conn:
            await conn.execute(console_sessions.insert().values(**row))
            await conn.execute(delete(console_sessions).where(t.expires_ms <= now))
            count = int(await conn.scalar(select(func.count()).select_from(console_sessions)) or 0)
            if count > self.limit:
                oldest = (
                    select(t.id_hash).order_by(t.created_ms, t.id_hash).limit(count - self.limit)
                )
                await conn.execute(delete(console_sessions).where(t.id_hash.in_(oldest)))
        return session

    async def get(self, session_id: str | None) -> Session | None:
        """The open session with this id, or None (unknown, expired, ended elsewhere)."""
        if not session_id or len(session_id) > 200:
            return None
        key = _id_hash(session_id)
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(console_sessions).where(console_sessions.c.id_hash == key)
                )
            ).first()
        if row is None:
            return None
        token = _unseal(session_id, row.sealed_token)
        if row.expires_ms <= self._now_ms() or token is None or row.via not in _VIA:
            await self.close(session_id)
            return None
        return Session(
            id=session_id,
            principal=_principal(row.role, row.team_id, row.principal),
            token=token,
            via=row.via,
            name=row.name,
            csrf=row.csrf,
            expires_ms=row.expires_ms,
        )

    async def close(self, session_id: str) -> None:
        """End the session on every replica."""
        async with self.db.engine.begin() as conn:
            await conn.execute(
                delete(console_sessions).where(console_sessions.c.id_hash == _id_hash(session_id))
            )

    async def count(self) -> int:
        """Sessions not yet expired."""
        async with self.db.engine.connect() as conn:
            n = await conn.scalar(
                select(func.count())
                .select_from(console_sessions)
                .where(console_sessions.c.expires_ms > self._now_ms())
            )
        return int(n or 0)


def cookie_is_secure(request: web.Request, setting: bool | str) -> bool:
    """Whether cookies get the ``Secure`` flag: ``auto`` leaves it off only for plain HTTP to
    a loopback address (a developer's machine, where browsers refuse Secure cookies on IPs)."""
    if setting is True or setting is False:
        return setting
    if request.secure:
        return True
    host = (request.host or "").rsplit(":", 1)[0].strip("[]")
    return host not in ("127.0.0.1", "localhost", "::1")
