"""The access log is rotated by size and by age, keeps a bounded number of old files, and is
rotated once when several processes share it; a line is the entry as recorded, and the
periodic flush encodes nothing on the event loop."""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from pathlib import Path

import orjson
import pytest

from fleetgate.telemetry import access_log
from fleetgate.telemetry.access_log import AccessLog
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream


def _entry(i: int, ts: float | None = None) -> dict[str, object]:
    return {"ts": ts or time.time(), "request_id": f"r{i:04d}", "pad": "x" * 80}


def _ids(path: Path) -> list[str]:
    return [orjson.loads(line)["request_id"] for line in path.read_bytes().splitlines()]


async def test_the_access_log_is_rotated_by_size_keeping_the_newest_backups(
    tmp_path: Path,
) -> None:
    """It grew without bound: ~620 bytes a request, forever."""
    path = tmp_path / "access.log"
    log = AccessLog(path, max_bytes=1_000, max_age_s=None, backups=2)
    for i in range(40):  # ~120 bytes a line, 4 lines a flush
        log.record(_entry(i))
        if i % 4 == 3:
            await log.flush()
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert names == ["access.log", "access.log.1", "access.log.2"]
    assert all(p.stat().st_size <= 1_000 for p in tmp_path.glob("access.log*"))
    kept = _ids(path.with_name("access.log.2")) + _ids(path.with_name("access.log.1")) + _ids(path)
    assert kept == [f"r{i:04d}" for i in range(40 - len(kept), 40)]  # the newest, in order
    assert log.rotations >= 3


async def test_the_access_log_is_rotated_by_age(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    day_old = time.time() - 86_500
    path.write_bytes(orjson.dumps(_entry(0, ts=day_old)) + b"\n")
    log = AccessLog(path, max_bytes=None, max_age_s=86_400, backups=1)
    log.record(_entry(1))
    await log.flush()
    assert _ids(path.with_name("access.log.1")) == ["r0000"]
    assert _ids(path) == ["r0001"]
    log.record(_entry(2))
    await log.flush()  # the new file is fresh: no second rotation
    assert _ids(path) == ["r0001", "r0002"] and log.rotations == 1


async def test_processes_sharing_the_log_rotate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    one = AccessLog(path, max_bytes=500, max_age_s=None, backups=3)
    two = AccessLog(path, max_bytes=500, max_age_s=None, backups=3)
    for i in range(5):
        one.record(_entry(i))
    await one.flush()
    found = os.stat(path).st_ino  # both find it too big ...
    one._rotate(path, found)  # ... the first rotates it and writes on
    one.record(_entry(5))
    await one.flush()
    two._rotate(path, found)  # ... the second sees another file by then: leaves it
    assert _ids(path) == ["r0005"]
    assert len(_ids(path.with_name("access.log.1"))) == 5
    assert not path.with_name("access.log.2").exists()


async def test_the_rotation_limits_come_from_the_server_config(
    gateway: GatewayFactory, upstream: FakeUpstream, tmp_path: Path
) -> None:
    cfg = {**one_alias(upstream), "server": {"access_log_max_bytes": 2_000}}
    client = await gateway(cfg)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        for _ in range(5):
            assert (
                await client.post("/v1/chat/completions", json=body, headers=AUTH)
            ).status == 200
        await asyncio.sleep(0.7)  # one flush of the log in between
    for _ in range(30):
        if (tmp_path / "access.log.1").exists():
            break
        await asyncio.sleep(0.1)
    assert (tmp_path / "access.log.1").exists()
    assert (tmp_path / "access.log").stat().st_size <= 2_000


async def test_a_line_is_the_entry_as_recorded(tmp_path: Path) -> None:
    """The line is encoded when the request ends: a later change to the dict is not written."""
    log = AccessLog(tmp_path / "access.log")
    entry = _entry(1)
    log.record(entry)
    entry["request_id"] = "changed"
    await log.flush()
    assert _ids(tmp_path / "access.log") == ["r0001"]
    assert log.written == 1


async def test_the_flush_encodes_nothing_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half a second of entries encoded in the flush's one step held the loop for 1-3 ms at
    ~2,000 requests/s (every request in flight waited); now the flush only joins bytes."""
    log = AccessLog(tmp_path / "access.log")
    for i in range(1_000):
        log.record(_entry(i))

    def no_encoding(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the flush encoded an entry")

    monkeypatch.setattr(access_log.orjson, "dumps", no_encoding)
    await log.flush()
    monkeypatch.undo()
    assert _ids(tmp_path / "access.log") == [f"r{i:04d}" for i in range(1_000)]


async def test_a_full_buffer_drops_the_oldest_lines_and_counts_them(tmp_path: Path) -> None:
    log = AccessLog(tmp_path / "access.log", max_buffer=3)
    for i in range(5):
        log.record(_entry(i))
    await log.flush()
    assert _ids(tmp_path / "access.log") == ["r0002", "r0003", "r0004"]
    assert (log.dropped, log.written) == (2, 3)


async def test_a_buffered_line_holds_only_its_own_bytes(tmp_path: Path) -> None:
    """orjson's result keeps the ~4 KB buffer it was written into; 1,000 buffered lines of
    ~120 bytes must not hold megabytes (a full buffer is 100,000 lines)."""
    log = AccessLog(tmp_path / "access.log")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1_000):
            log.record(_entry(i))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1_000 * 600  # ~200 bytes a line with the deque's share; 4 KB each before


async def test_a_header_that_is_not_utf8_costs_a_replacement_character_not_the_request(
    tmp_path: Path,
) -> None:
    """aiohttp keeps a header's non-UTF-8 bytes as lone surrogates; orjson refuses those (the
    fuzz of every header found a 500 on the request that carried one)."""
    log = AccessLog(tmp_path / "access.log")
    entry = _entry(1)
    entry["request_id"] = "r\udcff\udcfe1"
    log.record(entry)
    await log.flush()
    line = (tmp_path / "access.log").read_text(encoding="utf-8").strip()
    assert orjson.loads(line)["request_id"] == "r\ufffd\ufffd1"
