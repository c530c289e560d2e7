"""The access log is rotated by size and by age, keeps a bounded number of old files, and is
rotated once when several processes share it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson

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
