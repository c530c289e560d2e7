"""Two "regions" on one machine for the region failover test: each its own Redis (a spare
port), its own simulated engine (``fleetgate sim``) and two ``fleetgate serve`` processes,
all regions sharing one PostgreSQL database. ``Region.kill`` SIGKILLs every process of a
region at once (a region whose machines are gone).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from fleetgate.cli.processes import stop, wait_http
from tests.procs import free_port

__all__ = ["Region", "gateway_config", "start_gateway"]

MODEL = "tiny"


def gateway_config(engine: str) -> dict[str, object]:
    return {
        "models": [{"alias": MODEL, "deployments": [{"model": MODEL, "api_base": f"{engine}/v1"}]}],
        "health": {"probe_interval_s": 1},
        "tenancy": {"spend_flush_interval_s": 0.2},
    }


def start_gateway(
    stack: ExitStack, tmp: Path, name: str, config: dict[str, object], env: dict[str, str]
) -> tuple[str, subprocess.Popen[bytes]]:
    """``fleetgate serve`` with its data dir at ``tmp/name`` (the spool lives there)."""
    port = free_port()
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "--log-level", "WARNING", "serve",
           "--config", str(cfg), "--port", str(port), "--data-dir", str(tmp / name),
           "--no-watch"]  # fmt: skip
    log = stack.enter_context((tmp / f"{name}.log").open("ab"))
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    stack.callback(stop, proc)
    return f"http://127.0.0.1:{port}", proc


def _redis(stack: ExitStack, tmp: Path) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", str(tmp)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack.callback(stop, proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ping = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True)
        if ping.stdout.strip() == b"PONG":
            return port, proc
        time.sleep(0.05)
    raise AssertionError(f"redis-server on {port} did not answer")


def _sim(stack: ExitStack, tmp: Path, name: str) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port),
           "--model", MODEL, "--max-num-seqs", "16", "--decode-ms-per-step", "5",
           "--output-len", "8", "--prefill-ms-per-token", "0.01"]  # fmt: skip
    log = stack.enter_context((tmp / f"{name}-sim.log").open("wb"))
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    stack.callback(stop, proc)
    wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=60)
    return f"http://127.0.0.1:{port}", proc


class Region:
    """One region's Redis, engine and ``gateways`` serve processes (data dirs
    ``tmp/<name>-gwN``)."""

    def __init__(
        self, stack: ExitStack, tmp: Path, name: str, pg_url: str, master: str, gateways: int = 2
    ) -> None:
        self.name = name
        self.tmp = tmp
        self.redis_port, redis = _redis(stack, tmp)
        self.engine, engine = _sim(stack, tmp, name)
        self.env = {"FLEETGATE_MASTER_KEY": master, "FLEETGATE_DATABASE_URL": pg_url,
                    "FLEETGATE_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}"}  # fmt: skip
        self.data_dirs = [f"{name}-gw{i}" for i in range(gateways)]
        started = [
            start_gateway(stack, tmp, d, gateway_config(self.engine), self.env)
            for d in self.data_dirs
        ]
        for url, proc in started:
            wait_http(f"{url}/health/live", proc, timeout=90)
        self.urls = [url for url, _ in started]
        self.redis, self.engine_proc = redis, engine
        self.procs = [redis, engine, *(proc for _, proc in started)]

    def kill(self) -> None:
        """SIGKILL the region's gateways, Redis and engine, all at once."""
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
