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
expire ``ttl_s`` after sign-in (wall clock, the same on every replica). Each console request
costs one primary-key read.

How many are kept (so that one key cannot sign everyone else out):

- ``per_principal``: a principal (a key, an IdP subject) signing in once more than this ends
  its *own* oldest session, never anyone else's;
- ``limit`` (every principal together): when a sign-in would pass it, the principal holding
  the most sessions (two or more) gives up its oldest; when every principal holds only one,
  the new sign-in is refused (503 ``console_sessions_full``) rather than ending anyone's only
  session.

Example::

    sessions = Sessions(db, ttl_s=8 * 3600, limit=10_000, per_principal=10)
    session = await sessions.open(principal, key, "key", "team admin key_1")
    same = await sessions.get(session.id)      # on any replica
    await sessions.close(session.id)           # ends it everywhere
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.console.tables import console_sessions
from fleetgate.contract.principal import Principal
from fleetgate.errors import ServiceUnavailable
from fleetgate.store.database import Database

__all__ = [
    "COOKIE",
    "LOGIN_COOKIE",
    "Session",
    "Sessions",
    "SessionsFull",
    "cookie_is_secure",
    "same_token",
]

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
    has_flash: bool = False  # a one-time message waits for the next page (`take_flash`)
    flash: dict[str, Any] | None = None  # the message, once a page took it


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


# Whose session a row is: the principal's key id (``oidc:<subject>`` for single sign-on).
_OWNER = console_sessions.c.principal["key_id"].as_string()


class SessionsFull(ServiceUnavailable):
    """Every open session belongs to a different principal and there are ``limit`` of them."""

    code = "console_sessions_full"


class Sessions:
    """Open sessions in the database: at most ``per_principal`` each, ``limit`` in all."""

    def __init__(
        self,
        db: Database,
        ttl_s: float,
        limit: int,
        *,
        per_principal: int = 10,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.limit = limit
        self.per_principal = per_principal
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
        async with self.db.engine.begin() as conn:
            await conn.execute(console_sessions.insert().values(**row))
            t = console_sessions.c
            await conn.execute(delete(console_sessions).where(t.expires_ms <= now))
            await self._trim_own(conn, principal.key_id)
            if not await self._trim_all(conn):
                await conn.execute(delete(console_sessions).where(t.id_hash == row["id_hash"]))
                refused = True
            else:
                refused = False
        if refused:
            raise SessionsFull(
                "The console has as many people signed in as it allows "
                "(extensions.console.max_sessions); try again later.",
                headers={"Retry-After": "60"},
            )
        return session

    async def _trim_own(self, conn: AsyncConnection, owner: str) -> None:
        """End ``owner``'s oldest sessions past ``per_principal`` (its own, no one else's)."""
        t = console_sessions.c
        surplus = (
            select(t.id_hash)
            .where(_OWNER == owner)
            .order_by(t.created_ms.desc(), t.id_hash.desc())
            .offset(self.per_principal)
        )
        ids = list((await conn.scalars(surplus)).all())
        if ids:
            await conn.execute(delete(console_sessions).where(t.id_hash.in_(ids)))

    async def _trim_all(self, conn: AsyncConnection) -> bool:
        """Back within ``limit``: the oldest session of whoever holds the most (two or more)
        goes first. False when that would end someone's only session (refuse the new one)."""
        t = console_sessions.c
        count = int(await conn.scalar(select(func.count()).select_from(console_sessions)) or 0)
        for _ in range(max(0, count - self.limit)):
            held = func.count().label("held")
            top = (
                await conn.execute(
                    select(_OWNER.label("owner"), held)
                    .group_by(_OWNER)
                    .having(func.count() > 1)
                    .order_by(held.desc(), func.min(t.created_ms), _OWNER)
                    .limit(1)
                )
            ).first()
            if top is None:
                return False
            oldest = (
                select(t.id_hash)
                .where(_OWNER == top.owner)
                .order_by(t.created_ms, t.id_hash)
                .limit(1)
            )
            await conn.execute(
                delete(console_sessions).where(t.id_hash == (await conn.scalar(oldest)))
            )
        return True

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
            has_flash=row.flash is not None,
        )

    async def set_flash(self, session_id: str, flash: dict[str, Any]) -> None:
        """Keep ``flash`` for the session's next page (sealed: it may hold a new key)."""
        sealed = _seal(session_id, orjson.dumps(flash).decode())
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(console_sessions)
                .where(console_sessions.c.id_hash == _id_hash(session_id))
                .values(flash=sealed)
            )

    async def take_flash(self, session_id: str) -> dict[str, Any] | None:
        """The session's flash, once: the page that takes it clears it (of two pages taking
        it at once, one gets it)."""
        key = _id_hash(session_id)
        t = console_sessions.c
        async with self.db.engine.begin() as conn:
            sealed = await conn.scalar(select(t.flash).where(t.id_hash == key))
            if sealed is None:
                return None
            taken = await conn.execute(
                update(console_sessions)
                .where(t.id_hash == key, t.flash == sealed)
                .values(flash=None)
            )
        plain = _unseal(session_id, sealed) if taken.rowcount == 1 else None
        value = orjson.loads(plain) if plain else None
        return value if isinstance(value, dict) else None

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


def cookie_is_secure(
    request: web.Request, setting: bool | str, public_url: str | None = None
) -> bool:
    """Whether cookies get the ``Secure`` flag: ``setting`` when true or false; for ``auto``,
    the scheme of ``public_url`` (configuration); without one, the connection itself: TLS, or
    not a loopback socket, is Secure. Only plain HTTP that arrived on a loopback socket (a
    developer's machine, where browsers may refuse Secure cookies) addressed to a loopback
    name goes without: the Host header alone can never turn the flag off."""
    if setting is True or setting is False:
        return setting
    if public_url is not None:
        return urlsplit(public_url).scheme == "https"
    transport = request.transport
    if transport is None:
        return True
    if transport.get_extra_info("sslcontext") is not None:
        return True
    sockname = transport.get_extra_info("sockname")
    local = sockname[0] if isinstance(sockname, tuple) and sockname else None
    host = (request.host or "").rsplit(":", 1)[0].strip("[]")
    return not (_is_loopback(local) and host in ("127.0.0.1", "localhost", "::1"))


def _is_loopback(address: object) -> bool:
    try:
        return isinstance(address, str) and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
