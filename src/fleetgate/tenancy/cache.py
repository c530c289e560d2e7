"""`KeyCache`: every live key and team in memory; authentication is a hash and a dict lookup.

The cache is reloaded whole from the store when something changed (see `tenancy.sync`); the
request path only reads the current snapshot, which is swapped atomically.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select

from fleetgate.contract.principal import Principal
from fleetgate.errors import AuthenticationFailed
from fleetgate.store.database import Database
from fleetgate.tenancy.model import KeyEntry, Limits, TeamEntry, hash_key, jwt_key_id
from fleetgate.tenancy.tables import api_keys, teams, tenancy_state

__all__ = ["KeyCache", "Snapshot"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int = 0
    by_hash: dict[str, KeyEntry] = field(default_factory=dict)
    by_id: dict[str, KeyEntry] = field(default_factory=dict)
    teams: dict[str, TeamEntry] = field(default_factory=dict)


def _tags(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


class KeyCache:
    """An `Authenticator` over the virtual keys in the store, answering from memory."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self.snapshot = Snapshot()
        self._listeners: list[Callable[[Snapshot], None]] = []

    def subscribe(self, fn: Callable[[Snapshot], None]) -> None:
        """Call ``fn(snapshot)`` after every reload."""
        self._listeners.append(fn)

    def authenticate(self, token: str) -> Principal:
        entry = self.snapshot.by_hash.get(hash_key(token))
        if entry is None:
            raise AuthenticationFailed("Invalid API key.")
        if entry.expires_ms is not None and self._clock() * 1000 >= entry.expires_ms:
            raise AuthenticationFailed("This API key has expired.", code="expired_api_key")
        return entry.principal

    def entry(self, key_id: str) -> KeyEntry | None:
        return self.snapshot.by_id.get(key_id)

    def team(self, team_id: str) -> TeamEntry | None:
        return self.snapshot.teams.get(team_id)

    def team_name(self, team_id: str) -> str | None:
        """The team's name, or None for a team the snapshot does not hold."""
        team = self.team(team_id)
        return team.name if team is not None else None

    async def version(self) -> int:
        """The store's change counter (one cheap query; background only)."""
        async with self._db.engine.connect() as conn:
            value = await conn.scalar(
                select(tenancy_state.c.version).where(tenancy_state.c.id == 1)
            )
        return int(value or 0)

    async def load(self) -> Snapshot:
        """Read every team and live key and swap them in."""
        async with self._db.engine.connect() as conn:
            version = await conn.scalar(
                select(tenancy_state.c.version).where(tenancy_state.c.id == 1)
            )
            team_rows = (await conn.execute(select(teams))).all()
            key_rows = (
                await conn.execute(select(api_keys).where(api_keys.c.revoked_ms.is_(None)))
            ).all()
        team_map = {
            r.id: TeamEntry(
                id=r.id,
                name=r.name,
                limits=Limits.from_row(r),
                log_payloads=bool(r.log_payloads),
                tags=tuple(sorted(_tags(r.tags).items())),
            )
            for r in team_rows
        }
        by_hash: dict[str, KeyEntry] = {}
        by_id: dict[str, KeyEntry] = {  # JWT bearer callers: the team's limits, no key's
            jwt_key_id(t.id): KeyEntry(
                jwt_key_id(t.id), Principal(jwt_key_id(t.id), team_id=t.id), Limits(), t
            )
            for t in team_map.values()
        }
        for r in key_rows:
            team = team_map.get(r.team_id)
            if team is None:
                continue
            tags = {**dict(team.tags), **_tags(r.tags)}
            aliases = frozenset(r.aliases) if isinstance(r.aliases, list) else None
            principal = Principal(
                key_id=r.id,
                role=r.role if r.role in ("team_admin", "finance_viewer") else "user",
                team_id=r.team_id,
                user_id=r.user_id,
                allowed_aliases=aliases,
                tags=tuple(sorted(tags.items())),
            )
            entry = KeyEntry(r.id, principal, Limits.from_row(r), team, r.expires_ms, tags)
            by_hash[r.key_hash] = entry
            by_id[r.id] = entry
        snap = Snapshot(int(version or 0), by_hash, by_id, team_map)
        self.snapshot = snap
        for fn in self._listeners:
            fn(snap)
        return snap
