"""A batch line that fails fails alone: never retried forever, never holding the batch, its
lease or its team's slot (SQLite and PostgreSQL), and a batch stops when its credentials do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import DataError

from fleetgate.app import MIGRATIONS
from fleetgate.batches.config import BatchesConfig
from fleetgate.batches.grant import Grant
from fleetgate.batches.store import BatchStore
from fleetgate.batches.worker import BatchWorker, LineRequest
from fleetgate.store.database import Database
from tests.batches.support import chat_line, jsonl, records

TEAM = "team-1"


class Sender:
    """Answers each line with its text upper-cased; ``hang`` never answers, ``revoked`` is a
    401, ``later`` moves ``clock`` on by two seconds (time passing while it ran)."""

    def __init__(self, clock: list[int] | None = None) -> None:
        self.sent: list[str] = []
        self.grants: list[Grant | None] = []
        self.clock = clock

    def idle(self, alias: str) -> bool:
        return True

    async def send(self, line: LineRequest) -> tuple[int, dict[str, Any]]:
        text = line.body["messages"][0]["content"]
        self.sent.append(text)
        self.grants.append(line.grant)
        if text == "hang":
            await asyncio.Event().wait()
        if text == "revoked":
            error = {"message": "The key was revoked.", "code": "invalid_api_key"}
            return 401, {"error": {**error, "type": "authentication_error", "param": None}}
        if text == "later" and self.clock is not None:
            self.clock[0] += 2000
        return 200, {"choices": [{"message": {"content": text.upper()}}]}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'b.db'}"
    else:
        yield request.getfixturevalue("shared_pg_url")


@pytest.fixture
async def store(db_url: str, tmp_path: Path) -> AsyncIterator[BatchStore]:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    try:
        yield BatchStore(db)
    finally:
        await db.aclose()


async def _batch(
    store: BatchStore, lines: list[dict[str, Any]], *, principal: dict[str, Any] | None = None
) -> str:
    upload = await store.add_file(TEAM, "batch", "in.jsonl", jsonl(lines))
    row = await store.create(
        owner=TEAM, key_id="k", endpoint="/v1/chat/completions", input_file_id=upload.id,
        total=len(lines), meta=None, max_active=1, principal=principal,
    )  # fmt: skip
    return str(row["id"])


async def _finished(store: BatchStore, batch_id: str, timeout_s: float = 8.0) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        row = await store.batch(batch_id, TEAM)
        if row["status"] in ("completed", "cancelled", "failed", "expired"):
            return row
        await asyncio.sleep(0.02)
    raise AssertionError(f"batch did not finish: {row['status']}")


async def _nothing() -> None:
    return None


def _worker(store: BatchStore, sender: Sender, owner: str, **cfg: Any) -> BatchWorker:
    config = BatchesConfig(**{"tick_s": 0.02, "idle_wait_s": 0.01, "lease_s": 0.5, **cfg})
    return BatchWorker(store, lambda: config, sender, owner=owner, prepare=_nothing)


async def _run(worker: BatchWorker, store: BatchStore, batch_id: str) -> dict[str, Any]:
    await worker.start()
    try:
        return await _finished(store, batch_id)
    finally:
        await worker.aclose()


async def _errors(store: BatchStore, row: dict[str, Any]) -> list[tuple[Any, str]]:
    content = await store.content(row["error_file_id"], TEAM)
    return [
        (r["custom_id"], (r["error"] or r["response"]["body"]["error"])["code"])
        for r in records(content)
    ]


async def test_a_nul_in_a_custom_id_fails_its_line_once_and_frees_the_slot(
    store: BatchStore,
) -> None:
    sender = Sender()
    lines = [chat_line("ok-1", text="a"), chat_line("bad\x00id", text="b"), chat_line("ok-2")]
    batch_id = await _batch(store, lines)
    row = await _run(_worker(store, sender, "r1"), store, batch_id)
    assert row["status"] == "completed"
    assert sorted(sender.sent) == ["a", "hello"]  # the poison line never went upstream
    assert await _errors(store, row) == [(None, "invalid_request")]
    assert (await store.counts(batch_id)).failed == 1
    await _batch(store, [chat_line("next")])  # the team's one batch slot is free again


async def test_a_result_the_store_refuses_is_recorded_once_without_it(
    store: BatchStore,
) -> None:
    class Refusing(BatchStore):
        async def record(
            self, batch_id: str, line: int, custom_id: str | None, ok: bool, record: str
        ) -> bool:
            if custom_id == "refused":
                raise DataError("INSERT INTO fg_batch_results", {}, ValueError("bad data"))
            return await super().record(batch_id, line, custom_id, ok, record)

    refusing = Refusing(store.db)
    sender = Sender()
    batch_id = await _batch(refusing, [chat_line("refused", text="r"), chat_line("fine")])
    row = await _run(_worker(refusing, sender, "r1"), refusing, batch_id)
    assert row["status"] == "completed"
    assert sorted(sender.sent) == ["hello", "r"]  # sent once, never again
    assert await _errors(store, row) == [(None, "result_not_stored")]


async def test_a_line_not_answered_in_time_fails_alone(store: BatchStore) -> None:
    sender = Sender()
    lines = [chat_line("a", text="a"), chat_line("h", text="hang"), chat_line("b", text="b")]
    batch_id = await _batch(store, lines)
    row = await _run(_worker(store, sender, "r1", line_timeout_s=0.3), store, batch_id)
    assert row["status"] == "completed"
    assert await _errors(store, row) == [("h", "line_timeout")]
    out = records(await store.content(row["output_file_id"], TEAM))
    assert sorted(r["custom_id"] for r in out) == ["a", "b"]


async def _sent(sender: Sender, text: str, times: int) -> None:
    """Wait (8 s at most) until ``text`` was sent ``times`` times."""
    for _ in range(400):
        if sender.sent.count(text) == times:
            return
        await asyncio.sleep(0.02)


async def _crash(worker: BatchWorker) -> None:
    """Stop ``worker`` the way a dead or stalled replica stops: its lease is not given up."""
    tasks = list(worker.driving.values())
    worker.driving = {}
    for task in tasks:
        task.cancel()
    await worker._task.aclose()  # its loop only: no lease is given up
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_line_that_takes_its_replica_down_each_time_is_abandoned(
    store: BatchStore,
) -> None:
    sender = Sender()
    lines = [chat_line("a", text="a"), chat_line("poison", text="hang"), chat_line("b", text="b")]
    batch_id = await _batch(store, lines)
    for attempt in range(1, 3):  # max_line_attempts 2: two replicas go down with it
        worker = _worker(store, sender, f"r{attempt}", max_line_attempts=2)
        await worker.start()
        await _sent(sender, "hang", attempt)
        assert sender.sent.count("hang") == attempt
        await _crash(worker)
    survivor = _worker(store, sender, "r3", max_line_attempts=2)
    row = await _run(survivor, store, batch_id)  # takes the lease once r2's runs out
    assert row["status"] == "completed"
    assert sender.sent.count("hang") == 2  # not sent a third time
    assert await _errors(store, row) == [("poison", "line_abandoned")]
    assert row["line_attempts"] is None


async def test_an_expired_grant_stops_the_batch(store: BatchStore) -> None:
    clock = [1_800_000_000_000]
    timed = BatchStore(store.db, clock=lambda: clock[0])
    sender = Sender(clock)
    grant = Grant(frozenset({"tiny"}), "svc-1", clock[0] + 1000)
    texts = ["a", "later", "b", "c"]
    lines = [chat_line(f"c{i}", text=t) for i, t in enumerate(texts)]
    batch_id = await _batch(timed, lines, principal=grant.to_json())
    row = await _run(_worker(timed, sender, "r1", concurrency=1), timed, batch_id)
    assert sender.sent == ["a", "later"] and sender.grants == [grant, grant]
    assert row["status"] == "failed"
    assert row["errors"]["data"][0]["code"] == "expired_api_key"
    assert await _errors(timed, row) == [("c2", "expired_api_key"), ("c3", "expired_api_key")]


async def test_a_revoked_key_stops_the_batch(store: BatchStore) -> None:
    sender = Sender()
    lines = [chat_line(f"c{i}", text=t) for i, t in enumerate(["a", "revoked", "b"])]
    batch_id = await _batch(store, lines)
    row = await _run(_worker(store, sender, "r1", concurrency=1), store, batch_id)
    assert sender.sent == ["a", "revoked"]
    assert row["status"] == "failed"
    assert row["errors"]["data"][0]["code"] == "invalid_api_key"
    assert (await store.counts(batch_id)).completed == 1
    errors = await _errors(store, row)
    assert [code for _, code in errors] == ["invalid_api_key", "invalid_api_key"]


async def test_a_clean_shutdown_does_not_count_against_the_line(store: BatchStore) -> None:
    sender = Sender()
    batch_id = await _batch(store, [chat_line("slow", text="hang")])
    for attempt in range(1, 4):  # three deploys while the line runs: each replica stops cleanly
        worker = _worker(store, sender, f"r{attempt}", max_line_attempts=1)
        await worker.start()
        await _sent(sender, "hang", attempt)
        assert sender.sent.count("hang") == attempt  # sent again: it never took a replica down
        await worker.aclose()
    row = await store.batch(batch_id, TEAM)
    assert row["status"] == "in_progress" and not row["line_attempts"]
