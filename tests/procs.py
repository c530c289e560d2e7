"""Start real fleetgate processes (sim, serve) on 127.0.0.1 for end-to-end tests."""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import yaml

from fleetgate.cli.processes import stop, wait_http

__all__ = ["free_port", "metric_value", "serve_process", "serve_processes", "sim_process"]

# Ports for servers a test starts later come from below the system's ephemeral range
# (32768-60999 on Linux), one block per xdist worker: a port the system hands out for
# ``bind(0)`` or an outgoing connection, in this worker or another, can then never take a port
# picked here before its server binds it (CI failed once on exactly that).
_BLOCK = 2_000
_FIRST = 20_000
_WORKER = int(re.sub(r"\D", "", os.environ.get("PYTEST_XDIST_WORKER", "gw0")) or 0) % 6
_NEXT = itertools.count()


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and that no other test worker will pick."""
    base = _FIRST + _WORKER * _BLOCK
    for _ in range(_BLOCK):
        port = base + next(_NEXT) % _BLOCK
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {base}-{base + _BLOCK - 1}")


@contextmanager
def sim_process(*args: str) -> Iterator[str]:
    """``fleetgate sim`` on a free port; yields its base URL (with /v1)."""
    port = free_port()
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc)


@contextmanager
def _launched(
    config: dict[str, object],
    tmp: Path,
    master_key: str,
    extra_args: Sequence[str],
    env: dict[str, str] | None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    cfg = tmp / f"gateway-{port}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "serve", "--config", str(cfg),
           "--port", str(port), "--data-dir", str(tmp / f"data-{port}"), *extra_args]  # fmt: skip
    full_env = {**os.environ, "FLEETGATE_MASTER_KEY": master_key, **(env or {})}
    log = (tmp / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stop(proc)
        log.close()


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
    with _launched(config, tmp, master_key, extra_args, env) as (url, proc):
        # 60 s, not wait_http's 20: a start imports every feature, which took over 20 s
        # beside a loaded test run (tests/batches/test_restart failed so once)
        wait_http(f"{url}/health/live", proc, timeout=60.0)
        yield url, proc


@contextmanager
def serve_processes(
    count: int,
    config: dict[str, object],
    tmp: Path,
    *,
    master_key: str,
    env: dict[str, str] | None = None,
) -> Iterator[list[str]]:
    """``count`` replicas of ``fleetgate serve`` started together; yields their base URLs."""
    with ExitStack() as stack:
        started = [
            stack.enter_context(_launched(config, tmp, master_key, (), env)) for _ in range(count)
        ]
        for url, proc in started:
            wait_http(f"{url}/health/live", proc, timeout=60.0)
        yield [url for url, _ in started]


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
