"""Row leases and revision-checked updates (`fleetgate.store.rows`) on a real SQLite table."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    insert,
    select,
)

from fleetgate.store.rows import at_revision, now_ms, take_lease

md = MetaData()
things = Table(
    "things",
    md,
    Column("id", String(8), primary_key=True),
    Column("holder", String(16)),
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
)


@pytest.fixture
def conn() -> Iterator[Connection]:
    engine = create_engine("sqlite://")
    md.create_all(engine)
    with engine.begin() as c:
        for name in ("a", "b"):
            c.execute(insert(things).values(id=name, holder=None, lease_until_ms=0, revision=1,
                                            updated_ms=0, status="new"))  # fmt: skip
        yield c
    engine.dispose()


def _lease(c: Connection, owner: str, now: int, which: str = "a") -> bool:
    stmt = take_lease(things, owner, now, 10.0, things.c.id == which, owner_column="holder")
    return c.execute(stmt).rowcount == 1


def test_a_lease_is_held_renewed_and_taken_over_only_once_it_ran_out(conn: Connection) -> None:
    assert _lease(conn, "r1", 1_000)
    assert not _lease(conn, "r2", 5_000)  # r1 holds it until 11_000
    assert _lease(conn, "r1", 9_000)  # renewed: until 19_000
    assert not _lease(conn, "r2", 15_000)
    assert _lease(conn, "r2", 19_001)
    row = conn.execute(select(things).where(things.c.id == "a")).one()
    assert (row.holder, row.lease_until_ms) == ("r2", 29_001)
    other = conn.execute(select(things).where(things.c.id == "b")).one()
    assert other.holder is None  # only the row selected


def test_an_update_lands_only_on_the_revision_it_was_computed_from(conn: Connection) -> None:
    first = at_revision(things, 1, 700, {"status": "running"}, things.c.id == "a")
    assert conn.execute(first).rowcount == 1
    stale = at_revision(things, 1, 800, {"status": "stopped"}, things.c.id == "a")
    assert conn.execute(stale).rowcount == 0
    row = conn.execute(select(things).where(things.c.id == "a")).one()
    assert (row.status, row.revision, row.updated_ms) == ("running", 2, 700)


def test_now_ms_is_the_wall_clock_in_milliseconds() -> None:
    before = int(time.time() * 1000)
    assert before <= now_ms() <= int(time.time() * 1000)
