"""Routing fixtures: a private redis-server (channels and keys of routing are not prefixed per
test, so replicas of different tests must not meet)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.procs import free_port


@pytest.fixture
def redis_url() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import redis

        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
