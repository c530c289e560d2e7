"""The per-team limit of batches in progress holds across replicas (#33).

Two replicas (a `BatchStore` each, on its own connection pool) share one PostgreSQL database
and create batches for the same team at the same instant, many times over: the team never
has more than ``max_in_progress_per_team`` batches that have not ended, and every creation
past it is refused with 429 ``too_many_batches``. (The count and the insert are one step per
team: a transaction-scoped advisory lock on PostgreSQL, a lock in the one process that owns
an SQLite file.) The same holds for concurrent creations in one process on SQLite.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.batches.store import BatchStore
from fleetgate.errors import RateLimited
from fleetgate.store.database import Database

MAX_ACTIVE = 3
ATTEMPTS = 12  # per replica, all at once


async def _race(stores: list[BatchStore], owner: str) -> tuple[int, set[str]]:
    async def create(store: BatchStore) -> str:
        try:
            await store.create(owner=owner, key_id="k", endpoint="/v1/chat/completions",
                               input_file_id="file-x", total=1, meta=None,
                               max_active=MAX_ACTIVE)  # fmt: skip
        except RateLimited as exc:
            return exc.code
        return "created"

    answers = await asyncio.gather(*(create(s) for _ in range(ATTEMPTS) for s in stores))
    return answers.count("created"), set(answers)


@pytest.mark.postgres
async def test_two_replicas_creating_at_once_never_pass_the_team_limit(
    tmp_path: Path, shared_pg_url: str
) -> None:
    dbs = [Database.from_url(shared_pg_url, tmp_path, migrations=MIGRATIONS) for _ in range(2)]
    try:
        await dbs[0].migrate()
        stores = [BatchStore(db) for db in dbs]
        for round_ in range(5):
            created, answers = await _race(stores, f"team-{round_}")
            assert created == MAX_ACTIVE, (round_, created)
            assert answers == {"created", "too_many_batches"}
    finally:
        for db in dbs:
            await db.aclose()


async def test_concurrent_creations_in_one_process_never_pass_the_team_limit(
    tmp_path: Path,
) -> None:
    db = Database.from_url(f"sqlite:///{tmp_path / 'b.db'}", tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    try:
        created, _ = await _race([BatchStore(db)], "team")
        assert created == MAX_ACTIVE
    finally:
        await db.aclose()
