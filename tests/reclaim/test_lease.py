"""The acting replica's lease: one holder at a time, taken over only after it lapses, given back
on close; SQLite (the embedded default) and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.reclaim.lease import DatabaseLease
from fleetgate.store.database import Database


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def db(tmp_path: Path, database_url: str | None) -> AsyncIterator[Database]:
    db = Database.from_url(database_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    yield db
    await db.aclose()


async def test_one_holder_until_its_lease_lapses(db: Database) -> None:
    clock = Clock()
    a = DatabaseLease(db, "reclaim_lease", owner="a", ttl_s=10, clock=clock)
    b = DatabaseLease(db, "reclaim_lease", owner="b", ttl_s=10, clock=clock)
    assert await a.step() and not await b.step()
    clock.now += 6
    assert await a.step() and not await b.step()  # renewed: b still waits
    clock.now += 9
    assert await a.step() and not await b.step()  # renewed again, 15 s after it was taken
    clock.now += 11  # a stops renewing (stalled, cut off): the lease lapses
    assert await b.step() and b.leader
    assert not await a.step() and not a.leader  # its late renewal changes nothing
    assert await b.step()


async def test_a_released_lease_is_taken_at_once(db: Database) -> None:
    clock = Clock()
    a = DatabaseLease(db, "reclaim_lease", owner="a", ttl_s=10, clock=clock)
    b = DatabaseLease(db, "reclaim_lease", owner="b", ttl_s=10, clock=clock)
    assert await a.step()
    await a.release()
    assert not a.leader
    assert await b.step()
    assert not await a.step()


async def test_a_database_that_does_not_answer_means_not_acting(tmp_path: Path) -> None:
    down = Database("postgresql+asyncpg://u@127.0.0.1:9/none", migrations=MIGRATIONS)
    lease = DatabaseLease(down, "reclaim_lease", owner="a", ttl_s=10)
    assert not await lease.step() and not lease.leader
    await down.aclose()
