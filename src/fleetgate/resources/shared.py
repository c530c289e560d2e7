"""`SharedStates`: how the replicas of a gateway agree on shared definitions.

The database is the truth (`fleetgate.store.shared`); each process runs one poller that reads
every kind's version (one indexed query) every ``poll_interval_s`` and, for each kind that moved
(on any replica, or in another worker of this one), hands the kind's bodies to the components
that follow it. A change therefore reaches every replica within one poll interval (a quarter of
a second by default), with or without Redis, and a replica that restarts or was cut off from the
database catches up on its first successful poll. A snapshot read while this process was
writing the same kind (or older than its last write) is not handed on, so a change made here is
never undone for a quarter second by a poll that read across it (`SharedState.stale`). A
database that is down costs nothing but staleness: the followers keep what they had and the
poller retries.

Example::

    shared = SharedStates(databases)
    state = shared.state(db, "canary_splits")
    await shared.follow(state, splits.replace)     # called now, and on every later change
    ...
    await shared.aclose()
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fleetgate.resources.databases import Databases
from fleetgate.store.database import Database
from fleetgate.store.shared import SharedState, read_versions
from fleetgate.tasks import Background

__all__ = ["Follower", "SharedStates"]

log = logging.getLogger("fleetgate.resources.shared")

Follower = Callable[[dict[str, Any]], Awaitable[None] | None]


@dataclass(slots=True)
class _Kind:
    state: SharedState
    followers: list[Follower] = field(default_factory=list)
    seen: int = -1  # the version the followers were last given


class SharedStates:
    """The shared state kinds of one process and the poller that keeps followers current."""

    def __init__(self, databases: Databases, *, poll_interval_s: float = 0.25) -> None:
        self._databases = databases
        self.poll_interval_s = poll_interval_s
        self._kinds: dict[tuple[str, str], _Kind] = {}
        self._task = Background(self._poll, name="fg-shared")
        self.polls = 0
        self.failures = 0

    def state(self, db: Database, kind: str) -> SharedState:
        """The one `SharedState` of ``kind`` in ``db``."""
        entry = self._kinds.get((db.url, kind))
        if entry is None:
            entry = self._kinds[(db.url, kind)] = _Kind(SharedState(db, kind))
        return entry.state

    async def follow(self, state: SharedState, follower: Follower) -> None:
        """Give ``follower`` the kind's bodies now (when the database answers) and after every
        later change; starts the poller on first use."""
        entry = self._kinds.setdefault((state.db.url, state.kind), _Kind(state))
        entry.followers.append(follower)
        try:
            await self._databases.migrate(state.db)
            version, bodies = await state.load()
        except Exception as exc:  # the database may be away: the poller catches up later
            log.warning("shared %s not loaded yet (%s); retrying later", state.kind, exc)
        else:
            await _call(follower, bodies)
            if entry.seen < 0 or len(entry.followers) == 1:
                entry.seen = version
        self._task.start()

    def loaded(self, state: SharedState) -> bool:
        """Whether ``state``'s bodies have reached its followers at least once (readiness: a
        replica that could not read them at start serves without them until then)."""
        entry = self._kinds.get((state.db.url, state.kind))
        return entry is not None and entry.seen >= 0

    async def refresh(self) -> None:
        """Check every followed kind once (the poller's step; tests call it directly)."""
        by_db: dict[str, list[_Kind]] = {}
        for (url, _kind), entry in self._kinds.items():
            if entry.followers:
                by_db.setdefault(url, []).append(entry)
        for entries in by_db.values():
            db = entries[0].state.db
            await self._databases.migrate(db)
            async with db.engine.connect() as conn:
                versions = await read_versions(conn)
            for entry in entries:
                if versions.get(entry.state.kind, 0) != entry.seen:
                    version, bodies = await entry.state.load()
                    if entry.state.stale(version):  # read across our own write: next poll
                        continue
                    for follower in entry.followers:
                        await _call(follower, bodies)
                    entry.seen = version

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await self.refresh()
                self.polls += 1
            except Exception as exc:  # keep what we have; try again next interval
                self.failures += 1
                log.debug("shared state poll failed: %s", exc)

    async def aclose(self) -> None:
        """Stop polling (idempotent)."""
        await self._task.aclose()


async def _call(follower: Follower, bodies: dict[str, Any]) -> None:
    try:
        result = follower(bodies)
        if inspect.isawaitable(result):
            await result
    except Exception:  # one follower's bug must not stop the others or the poller
        log.exception("a shared state follower failed")
