"""`fleetgate serve --workers N` restarts a worker that dies, and says loudly that limits are
per worker without Redis."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path

from tests.procs import serve_process

CONFIG = {
    "models": [
        {"alias": "a", "deployments": [{"model": "m", "api_base": "http://127.0.0.1:9/v1"}]}
    ],
}


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:  # a thread may end between the listing and the read
            text = (task / "children").read_text().split()
        except OSError:
            continue
        out |= {int(c) for c in text}
    return out


def _workers(pid: int) -> set[int]:
    # spawn's resource tracker is a child too; workers are the ones serving (they have threads)
    return {
        c for c in _children(pid) if b"fleetgate" in _cmdline(c) or b"spawn_main" in _cmdline(c)
    }


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_killed_worker_is_restarted_and_the_gateway_keeps_answering(tmp_path: Path) -> None:
    args = ["--workers", "2", "--no-watch"]
    with serve_process(CONFIG, tmp_path, master_key="k", extra_args=args) as (url, proc):
        deadline = time.monotonic() + 30
        while len(_workers(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        before = _workers(proc.pid)
        assert len(before) == 2
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = _workers(proc.pid)
            if len(now) == 2 and victim not in now:
                break
            time.sleep(0.2)
        now = _workers(proc.pid)
        assert len(now) == 2 and victim not in now
        answered = 0
        deadline = time.monotonic() + 30
        while answered < 10 and time.monotonic() < deadline:
            try:  # a connection may land on the new worker's socket before it accepts
                with urllib.request.urlopen(url + "/health", timeout=10) as resp:
                    answered += resp.status == 200
            except OSError:
                time.sleep(0.2)
        assert answered == 10
    log = next(tmp_path.glob("gateway-*.log")).read_text()
    assert "without FLEETGATE_REDIS_URL" in log
    assert "starting another" in log
