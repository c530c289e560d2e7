"""Start real fleetgate processes (sim, serve) on 127.0.0.1 for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status < 500:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def sim_process(*args: str) -> Iterator[str]:
    """``fleetgate sim`` on a free port; yields its base URL (with /v1)."""
    port = free_port()
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


@contextmanager
def serve_process(
    config: dict[str, object],
    tmp: Path,
    *,
    master_key: str,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``fleetgate serve`` with ``config`` on a free port; yields (base URL, process)."""
    port = free_port()
    cfg = tmp / f"gateway-{port}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "serve", "--config", str(cfg),
           "--port", str(port), "--data-dir", str(tmp / f"data-{port}"), *extra_args]  # fmt: skip
    full_env = {**os.environ, "FLEETGATE_MASTER_KEY": master_key, **(env or {})}
    log = (tmp / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health/live", proc)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        _stop(proc)
        log.close()


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if not m:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total
