"""`BatchWorker` and `BatchRun` over a real store, with a sender that answers in process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.batches.config import BatchesConfig
from fleetgate.batches.store import BatchStore
from fleetgate.batches.worker import BatchWorker, LineRequest
from fleetgate.store.database import Database
from tests.batches.support import chat_line, jsonl, records


class Sender:
    """Answers each line with its custom text; ``fail`` raises instead; ``busy`` is not idle."""

    def __init__(self) -> None:
        self.busy = False
        self.sent: list[str] = []

    def idle(self, alias: str) -> bool:
        return not self.busy

    async def send(self, line: LineRequest) -> tuple[int, dict[str, Any]]:
        text = line.body["messages"][0]["content"]
        self.sent.append(line.request_id)
        if text == "fail":
            raise RuntimeError("boom")
        return 200, {"choices": [{"message": {"content": text.upper()}}]}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[BatchStore]:
    db = Database.from_url(f"sqlite:///{tmp_path / 'b.db'}", tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    try:
        yield BatchStore(db)
    finally:
        await db.aclose()


async def _batch(store: BatchStore, texts: list[str]) -> str:
    data = jsonl([chat_line(f"c{i}", text=t) for i, t in enumerate(texts)])
    upload = await store.add_file("team-1", "batch", "in.jsonl", data)
    row = await store.create(
        owner="team-1", key_id="k", endpoint="/v1/chat/completions", input_file_id=upload.id,
        total=len(texts), meta=None, max_active=4,
    )  # fmt: skip
    return str(row["id"])


async def _finished(store: BatchStore, batch_id: str) -> dict[str, Any]:
    for _ in range(200):
        row = await store.batch(batch_id, "team-1")
        if row["status"] in ("completed", "cancelled", "failed", "expired"):
            return row
        await asyncio.sleep(0.02)
    raise AssertionError("batch did not finish")


async def test_a_line_that_raises_is_an_error_entry_and_the_rest_complete(
    store: BatchStore,
) -> None:
    sender = Sender()
    cfg = BatchesConfig(tick_s=0.02, idle_wait_s=0.01)
    worker = BatchWorker(store, lambda: cfg, sender, owner="r1", prepare=_nothing)
    batch_id = await _batch(store, ["a", "fail", "b"])
    await worker.start()
    try:
        row = await _finished(store, batch_id)
    finally:
        await worker.aclose()
    assert row["status"] == "completed"
    out = records(await store.content(row["output_file_id"], "team-1"))
    assert [r["custom_id"] for r in out] == ["c0", "c2"]
    assert out[0]["response"]["body"]["choices"][0]["message"]["content"] == "A"
    errors = records(await store.content(row["error_file_id"], "team-1"))
    assert [(r["custom_id"], r["error"]["code"]) for r in errors] == [("c1", "internal_error")]


async def test_nothing_is_sent_while_the_pool_is_busy(store: BatchStore) -> None:
    sender = Sender()
    sender.busy = True
    cfg = BatchesConfig(tick_s=0.02, idle_wait_s=0.01)
    worker = BatchWorker(store, lambda: cfg, sender, owner="r1", prepare=_nothing)
    batch_id = await _batch(store, ["a", "b"])
    await worker.start()
    try:
        await asyncio.sleep(0.3)
        assert sender.sent == [] and batch_id in worker.driving
        sender.busy = False
        row = await _finished(store, batch_id)
    finally:
        await worker.aclose()
    assert row["status"] == "completed" and sorted(sender.sent) == [
        f"{batch_id}-1",
        f"{batch_id}-2",
    ]


async def test_only_one_replica_drives_a_batch(store: BatchStore) -> None:
    cfg = BatchesConfig(lease_s=5.0)
    batch_id = await _batch(store, ["a"])
    assert await store.lease(batch_id, "r1", cfg.lease_s)
    assert not await store.lease(batch_id, "r2", cfg.lease_s)  # held by r1
    assert await store.runnable() == []  # nobody else looks at it while the lease lasts
    assert await store.lease(batch_id, "r1", cfg.lease_s)  # the holder renews
    await store.release(batch_id, "r1")
    assert await store.lease(batch_id, "r2", cfg.lease_s)  # given up: taken at once


async def _nothing() -> None:
    return None


async def test_a_nudge_starts_a_new_batch_at_once_however_long_the_tick(
    store: BatchStore,
) -> None:
    sender = Sender()
    cfg = BatchesConfig(tick_s=60.0, idle_wait_s=0.01)
    worker = BatchWorker(store, lambda: cfg, sender, owner="r1", prepare=_nothing)
    await worker.start()
    try:
        await asyncio.sleep(0.1)  # the first tick ran with nothing to drive; the next is 60 s away
        batch_id = await _batch(store, ["a"])
        await asyncio.sleep(0.2)
        assert sender.sent == []  # without a nudge it waits for the tick
        worker.nudge()  # what the API does after creating (or cancelling) a batch
        row = await _finished(store, batch_id)
    finally:
        await worker.aclose()
    assert row["status"] == "completed" and sender.sent == [f"{batch_id}-1"]
