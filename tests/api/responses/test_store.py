"""`ResponseStore` on SQLite and the real PostgreSQL: chains, owners, expiry and purge."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.api.responses.store import ResponseStore
from fleetgate.errors import NotFound
from fleetgate.store import Database
from tests.tenancy.support import migrated_database


@pytest.fixture(params=["sqlite", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async with migrated_database(request.param, tmp_path) as database:
        yield database


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _response(rid: str, previous: str | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "response", "previous_response_id": previous, "output": []}


def _turn(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]


async def test_history_walks_the_chain_oldest_first_for_its_owner_only(db: Database) -> None:
    clock = Clock()
    store = ResponseStore(db, clock)
    await store.save("team-a", _response("r1"), _turn(1), 60)
    await store.save("team-a", _response("r2", "r1"), _turn(2), 60)
    await store.save("team-a", _response("r3", "r2"), _turn(3), 60)
    await store.save("team-a", _response("other", "r1"), _turn(9), 60)  # a fork
    history = await store.history("team-a", "r3", max_turns=100)
    assert [m["content"] for m in history] == ["q1", "a1", "q2", "a2", "q3", "a3"]
    fork = await store.history("team-a", "other", max_turns=100)
    assert [m["content"] for m in fork] == ["q1", "a1", "q9", "a9"]
    limited = await store.history("team-a", "r3", max_turns=2)
    assert [m["content"] for m in limited] == ["q2", "a2", "q3", "a3"]
    with pytest.raises(NotFound) as caught:
        await store.history("team-b", "r3", max_turns=100)
    assert caught.value.to_dict()["error"]["param"] == "previous_response_id"
    with pytest.raises(NotFound):
        await store.get("team-b", "r1")
    with pytest.raises(NotFound):
        await store.delete("team-b", "r1")
    assert (await store.get("team-a", "r2"))["id"] == "r2"


async def test_expired_responses_are_not_found_and_purged(db: Database) -> None:
    clock = Clock()
    store = ResponseStore(db, clock)
    await store.save("t", _response("old"), _turn(1), 10)
    clock.ms += 5_000
    await store.save("t", _response("new", "old"), _turn(2), 10)
    clock.ms += 6_000  # "old" expired, "new" not yet
    with pytest.raises(NotFound):
        await store.get("t", "old")
    # The chain continues from what is left.
    assert [m["content"] for m in await store.history("t", "new", 100)] == ["q2", "a2"]
    assert await store.purge() == 1
    clock.ms += 5_000
    assert await store.purge() == 1
    with pytest.raises(NotFound):
        await store.history("t", "new", 100)


async def test_delete_removes_the_response(db: Database) -> None:
    store = ResponseStore(db, Clock())
    await store.save("t", _response("r1"), _turn(1), 60)
    await store.delete("t", "r1")
    with pytest.raises(NotFound):
        await store.get("t", "r1")
    with pytest.raises(NotFound):
        await store.delete("t", "r1")
