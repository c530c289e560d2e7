"""The record writer: a record the store refuses is set aside (never blocks the rest), a full
spool disk never fails a response, memory stays bounded through an outage, and a flush keeps
pace while the event loop is saturated."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select

from fleetgate.app import MIGRATIONS
from fleetgate.store import Database
from fleetgate.tenancy.tables import request_audit, spend, spend_tags
from fleetgate.tenancy.writer import RecordWriter
from tests.tenancy.support import (
    TcpProxy,
    crash_writer,
    create_pg_database,
    drop_pg_database,
    running_gateway,
    wait_for,
)


def _row(rid: str, **fields: Any) -> dict[str, Any]:
    row = {"request_id": rid, "created_ms": 1, "key_id": "k", "team_id": "t", "alias": "a",
           "deployment": "d", "version": "v", "status": 200, "input_tokens": 1,
           "output_tokens": 1, "cached_tokens": 0, "cost_nusd": 7, "latency_ms": 1,
           "tags": {"env": "x"}}  # fmt: skip
    row.update(fields)
    return row


def _audit(rid: str, **fields: Any) -> dict[str, Any]:
    row = {"request_id": rid, "created_ms": 1, "key_id": "k", "team_id": "t", "alias": "a",
           "decision": "allowed", "status": 200, "error_type": None, "prompt": None,
           "response": None}  # fmt: skip
    row.update(fields)
    return row


async def _flushed(writer: RecordWriter, timeout: float = 30.0) -> None:
    """Flush until nothing is pending; fail (never hang) when that does not happen in time."""
    deadline = time.monotonic() + timeout
    while True:
        await asyncio.wait_for(writer.flush(), timeout)
        if writer.pending() == 0:
            return
        assert time.monotonic() < deadline, f"{writer.pending()} records never left the spool"
        await asyncio.sleep(0.05)


async def test_values_longer_than_their_columns_never_block_the_writer(
    db_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL one over-long value (a key tag, a model name) made every batch fail, so the
    writer retried it forever and every tenant's spend and audit stopped."""
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    writer = RecordWriter(db, tmp_path / "spool")
    try:
        long_model = "m" * 300
        writer.submit_all([
            ("spend", _row("long", alias=long_model, tags={"feature": "x" * 400})),
            ("audit", _audit("long", alias=long_model, error_type="e" * 100)),
        ])  # fmt: skip
        writer.submit("spend", _row("after"))
        await _flushed(writer, timeout=10)
        async with db.engine.connect() as conn:
            rows = dict((await conn.execute(select(spend.c.request_id, spend.c.alias))).all())
            tags = (await conn.execute(select(spend_tags.c.tag))).scalars().all()
            audited = (await conn.execute(select(request_audit.c.alias))).scalars().all()
        assert rows == {"long": "m" * 200, "after": "a"}  # clamped to the column, not lost
        assert sorted(len(t) for t in tags) == [5, 300]
        assert audited == ["m" * 200]
        assert writer.dead_letters.count() == 0
    finally:
        await writer.aclose()
        await db.aclose()


@pytest.mark.postgres
async def test_a_refused_record_among_10000_is_set_aside_and_every_other_is_written_once(
    tmp_path: Path,
) -> None:
    url = await create_pg_database()
    db = Database.from_url(url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        earlier = RecordWriter(db, tmp_path / "earlier")
        for i in range(3_000):  # the first 3,000 already reached the store before the crash
            earlier.submit("spend", _row(f"r{i:05d}"))
        await _flushed(earlier)
        await earlier.aclose()
        crashed = RecordWriter(db, tmp_path / "spool", segment_max_records=20_000)
        for i in range(10_000):
            if i == 5_000:  # the store refuses it: a NOT NULL column without a value
                crashed.submit("spend", _row(f"r{i:05d}", key_id=None))
            else:
                crashed.submit("spend", _row(f"r{i:05d}"))
        await crash_writer(crashed)  # the process dies: its spool (all 10,000) is replayed
        for _ in range(2):  # two restarts: the second finds nothing left to do
            restarted = RecordWriter(db, tmp_path / "spool")
            await restarted.start()
            assert restarted.pending() == 0
            await restarted.aclose()
        async with db.engine.connect() as conn:
            count = await conn.scalar(select(func.count()).select_from(spend))
            distinct = await conn.scalar(select(func.count(func.distinct(spend.c.request_id))))
            total = await conn.scalar(select(func.sum(spend.c.cost_nusd)))
            ids = set((await conn.execute(select(spend.c.request_id))).scalars().all())
        assert (count, distinct, total) == (9_999, 9_999, 9_999 * 7)
        assert ids == {f"r{i:05d}" for i in range(10_000)} - {"r05000"}
        lines = (tmp_path / "spend-dead-letters.jsonl").read_bytes().splitlines()
        assert len(lines) == 1
        entry = orjson.loads(lines[0])
        assert entry["kind"] == "spend" and entry["row"]["request_id"] == "r05000"
        assert "key_id" in entry["error"]
        assert list((tmp_path / "spool").glob("seg-*.jsonl")) == []
    finally:
        await db.aclose()
        await drop_pg_database(url)


async def test_a_transient_store_error_keeps_the_batch_and_sets_nothing_aside(
    tmp_path: Path,
) -> None:
    db = Database.from_url(None, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    db.busy_timeout_s = 0.1
    writer = RecordWriter(db, tmp_path / "spool")
    lock = sqlite3.connect(tmp_path / "fleetgate.db", isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # another writer holds the database: "locked"
        for i in range(20):
            writer.submit("spend", _row(f"t{i}"))
        await writer.flush()
        assert not writer.healthy
        assert writer.pending() == 20 and writer.dead_letters.count() == 0
        lock.execute("ROLLBACK")
        await _flushed(writer)
        assert writer.healthy and writer.written == 20
    finally:
        lock.close()
        await writer.aclose()
        await db.aclose()


async def test_a_full_spool_disk_never_fails_a_response_and_the_request_is_still_billed(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spool append raised ENOSPC into the request: a 500 after the upstream was paid, and
    a stream ended without its spend record."""
    import fleetgate.tenancy.journal as journal

    real_write = os.write
    full = True

    def write(fd: int, data: Any) -> int:
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    async with running_gateway(upstream, tmp_path, None) as gw:
        _, key_id, key = await gw.team_and_key("disk")
        monkeypatch.setattr(journal.os, "write", write)
        status, headers, _ = await gw.chat(key)
        assert status == 200
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                "stream": True, "max_tokens": 8}  # fmt: skip
        async with gw.session.post(
            gw.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as resp:
            assert resp.status == 200
            text = await resp.text()
        assert text.rstrip().endswith("data: [DONE]") and '"error"' not in text
        ids = {headers["x-request-id"], resp.headers["x-request-id"]}

        async def billed() -> bool:
            await gw.tenancy.writer.flush()  # straight from memory: the spool is still full
            async with gw.tenancy.db.engine.connect() as conn:
                rows = (await conn.execute(select(spend.c.request_id))).scalars().all()
            return set(rows) == ids

        await wait_for(billed, timeout=10)
        full = False
        assert gw.tenancy.writer.dropped == 0


@pytest.mark.postgres
async def test_records_held_in_memory_stay_bounded_through_an_outage(tmp_path: Path) -> None:
    url = await create_pg_database()
    proxy = TcpProxy(5432)
    await proxy.start()
    db = Database.from_url(
        url.replace(":5432/", f":{proxy.port}/"), tmp_path, migrations=MIGRATIONS
    )
    writer = RecordWriter(db, tmp_path / "spool", max_pending=1_000, segment_max_records=500)
    try:
        await db.migrate()
        await proxy.cut()
        for i in range(6_000):
            writer.submit_all([("spend", _row(f"o{i:05d}")), ("audit", _audit(f"o{i:05d}"))])
            if i % 1_000 == 999:
                await writer.flush()  # fails: the store is away
                assert writer.held() <= 1_000
        assert not writer.healthy and writer.pending() == 12_000
        assert len(list((tmp_path / "spool").glob("seg-*.jsonl"))) > 10  # the rest is on disk
        await proxy.restore()
        await _flushed(writer, timeout=60)
        assert writer.written == 6_000 and writer.held() == 0
        assert len(list((tmp_path / "spool").glob("seg-*.jsonl"))) <= 1  # the open one
    finally:
        await writer.aclose()
        await db.aclose()
        await proxy.close()
        await drop_pg_database(url)


@pytest.mark.slow
async def test_a_flush_keeps_pace_while_the_event_loop_is_saturated(tmp_path: Path) -> None:
    """Under load the writer starved: every statement of every batch waited its turn behind
    the requests on the loop, so records piled up until the load stopped."""
    db = Database.from_url(None, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    writer = RecordWriter(db, tmp_path / "spool", fsync=False)
    stop = asyncio.Event()

    async def request_like() -> None:  # ~1 ms of work between awaits, like a busy gateway
        while not stop.is_set():
            end = time.perf_counter() + 0.001
            while time.perf_counter() < end:
                pass
            await asyncio.sleep(0)

    busy = [asyncio.ensure_future(request_like()) for _ in range(50)]
    try:
        for i in range(20_000):
            writer.submit_all([("spend", _row(f"b{i:05d}")), ("audit", _audit(f"b{i:05d}"))])
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await asyncio.wait_for(writer.flush(), 90)
        took = time.monotonic() - started
        assert writer.pending() == 0 and writer.written == 20_000
        # ~50 ms per loop turn here: a flush that needs a turn per statement took minutes
        assert took < 30, took
    finally:
        stop.set()
        await asyncio.gather(*busy)
        await writer.aclose()
        await db.aclose()


async def test_records_set_aside_are_counted_and_listed_for_the_master_only(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team, _, _ = await gw.team_and_key("ops")
        _, admin = await gw.admin("POST", "/admin/keys", json={"team": team, "role": "team_admin"})
        writer = gw.tenancy.writer
        writer.submit_all([("spend", _row("ok-1")), ("spend", _row("bad", created_ms=None))])
        writer.submit("audit", _audit("ok-2"))
        await _flushed(writer)
        status, listing = await gw.admin("GET", "/admin/spend/dead-letters")
        assert status == 200 and listing["total"] == 1
        (entry,) = listing["data"]
        assert entry["kind"] == "spend" and entry["row"]["request_id"] == "bad"
        assert "created_ms" in entry["error"]
        assert (await gw.admin("GET", "/admin/spend/dead-letters", admin["key"]))[0] == 403
        assert (await gw.admin("GET", "/admin/spend/dead-letters?limit=0"))[0] == 400
        async with gw.session.get(gw.url + "/metrics") as resp:
            metrics = await resp.text()
        assert "fleetgate_spend_dead_letters_total 1" in metrics
        async with gw.tenancy.db.engine.connect() as conn:
            ids = (await conn.execute(select(spend.c.request_id))).scalars().all()
        assert ids == ["ok-1"]
