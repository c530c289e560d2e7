"""Keys' last use: noted on the request path without I/O, written at most once a minute per key,
in one batch, never backwards; and end to end, a key's request shows in ``/admin/keys``."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from fleetgate.contract.principal import Principal
from fleetgate.store.database import Database
from fleetgate.tenancy.key_use import KeyUse
from fleetgate.tenancy.service import TenancyService
from fleetgate.tenancy.tables import api_keys
from tests.tenancy.support import migrated_database

MASTER = Principal(key_id="master", role="master")


async def _nothing() -> None:
    return None


async def _keys(db: Database, n: int) -> list[str]:
    service = TenancyService(db, _nothing)
    team = await service.create_team(MASTER, {"name": "search"})
    return [(await service.create_key(MASTER, {"team": team["id"]}))["id"] for _ in range(n)]


async def _last_used(db: Database) -> dict[str, int | None]:
    async with db.engine.connect() as conn:
        rows = (await conn.execute(select(api_keys.c.id, api_keys.c.last_used_ms))).all()
    return {r.id: r.last_used_ms for r in rows}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_uses_are_written_once_a_minute_in_one_batch(kind: str, tmp_path: Path) -> None:
    now = [1_000_000.0]
    async with migrated_database(kind, tmp_path) as db:
        a, b, c = await _keys(db, 3)
        use = KeyUse(db, clock=lambda: now[0])
        assert await _last_used(db) == {a: None, b: None, c: None}
        for _ in range(1000):  # a busy key: noted once
            use.seen(a)
        use.seen(b)
        assert use.pending() == 2
        assert await use.flush() == 2
        assert await _last_used(db) == {a: 1_000_000_000, b: 1_000_000_000, c: None}
        assert await use.flush() == 0  # nothing new: no statement

        now[0] += 30  # within the minute: not noted again
        use.seen(a)
        assert use.pending() == 0
        now[0] += 31
        use.seen(a)
        assert await use.flush() == 1
        assert (await _last_used(db))[a] == 1_000_061_000

        # Another replica wrote a later time first: an older one never moves it back.
        older = KeyUse(db, clock=lambda: 999_000.0)
        older.seen(a)
        await older.flush()
        assert (await _last_used(db))[a] == 1_000_061_000


async def test_a_failed_write_keeps_the_uses_for_the_next(tmp_path: Path) -> None:
    async with migrated_database("sqlite", tmp_path) as db:
        (a,) = await _keys(db, 1)
        use = KeyUse(db, clock=lambda: 5.0)
        use.seen(a)
        engine = db.engine

        class Broken:
            def begin(self) -> None:
                raise OSError("database away")

        db.engine = Broken()  # type: ignore[assignment]
        with pytest.raises(OSError):
            await use.flush()
        assert use.pending() == 1
        db.engine = engine
        assert await use.flush() == 1
        assert (await _last_used(db))[a] == 5000


async def test_forget_bounds_what_is_noted(tmp_path: Path) -> None:
    async with migrated_database("sqlite", tmp_path) as db:
        use = KeyUse(db, clock=lambda: 1.0)
        for i in range(100):
            use.seen(f"key_{i}")
        await use.flush()  # no such keys in the table: nothing changes, nothing fails
        use.forget({"key_1"})
        use.seen("key_1")  # still within its minute
        use.seen("key_2")  # forgotten: noted again
        assert use.pending() == 1
