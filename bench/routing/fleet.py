"""Processes of the routing benchmark: a fleet of simulators, the gateway, vllm-router."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleetgate.cli.processes import free_port, stop, wait_http

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{path}" if path else str(REPO / "src")}


@dataclass(frozen=True)
class SimFlags:
    model: str = "tiny"
    kv_blocks: int = 480
    block_size: int = 16
    prefill_ms_per_token: float = 0.25
    decode_ms_per_step: float = 12.0
    decode_batch_factor: float = 0.01
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 4096
    output_len: int = 24
    seed: int = 7

    def args(self) -> list[str]:
        return [
            "--model", self.model, "--kv-blocks", str(self.kv_blocks),
            "--block-size", str(self.block_size),
            "--prefill-ms-per-token", str(self.prefill_ms_per_token),
            "--decode-ms-per-step", str(self.decode_ms_per_step),
            "--decode-batch-factor", str(self.decode_batch_factor),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--output-len", str(self.output_len), "--seed", str(self.seed),
        ]  # fmt: skip


def _counter(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Fleet:
    """``n`` simulators started together; ``urls`` are their base URLs (no /v1)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls

    @classmethod
    @contextmanager
    def start(cls, n: int, flags: SimFlags, tmp: Path) -> Iterator[Fleet]:
        procs: list[subprocess.Popen[bytes]] = []
        urls: list[str] = []
        try:
            for i in range(n):
                port = free_port()
                cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port),
                       *flags.args(), "--seed", str(flags.seed + i)]  # fmt: skip
                log = (tmp / f"sim-{i}.log").open("wb")
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                              env=_env()))  # fmt: skip
                log.close()
                urls.append(f"http://127.0.0.1:{port}")
            for url, proc in zip(urls, procs, strict=True):
                wait_http(f"{url}/health", proc, timeout=60)
            yield cls(urls)
        finally:
            for proc in procs:
                stop(proc)

    def prefix_counters(self) -> tuple[float, float]:
        """(hits, queries) summed over the fleet, from the simulators' own metrics."""
        hits = queries = 0.0
        for url in self.urls:
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            hits += _counter(text, "vllm:prefix_cache_hits_total")
            queries += _counter(text, "vllm:prefix_cache_queries_total")
        return hits, queries


@contextmanager
def gateway_process(config: dict[str, Any], tmp: Path, master: str) -> Iterator[str]:
    """``fleetgate serve`` with ``config``; yields its base URL."""
    port = free_port()
    path = tmp / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "serve", "--config", str(path),
           "--port", str(port), "--data-dir", str(tmp / "data"), "--no-watch"]  # fmt: skip
    env = {**_env(), "FLEETGATE_MASTER_KEY": master}
    log = (tmp / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/live", proc, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
        log.close()


@contextmanager
def router_process(binary: str, urls: list[str], tmp: Path) -> Iterator[str]:
    """vllm-router with its cache-aware policy in front of ``urls``; yields its base URL."""
    port = free_port()
    cmd = [binary, "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware",
           "--worker-urls", *urls, "--prometheus-host", "127.0.0.1",
           "--prometheus-port", str(free_port()), "--log-level", "warning"]  # fmt: skip
    log = (tmp / f"vllm-router-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
        log.close()
