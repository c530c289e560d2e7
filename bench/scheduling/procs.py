"""Processes of the scheduling benchmark: one simulated engine and one gateway per mode.

The gateway is ``fleetgate serve`` with tenancy on SQLite in a fresh data dir; its teams and
keys are made through the admin API, then the config naming them (``scheduling.teams``) is
written and applied with ``POST /admin/config/reload``.
"""

from __future__ import annotations

import json
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
MASTER = "sk-bench-master"


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    src = str(REPO / "src")
    return {**os.environ, "PYTHONPATH": f"{src}:{path}" if path else src}


@dataclass(frozen=True)
class Engine:
    """The simulated engine: ``max_num_seqs`` run at once, one token per step each."""

    max_num_seqs: int = 24
    decode_ms_per_step: float = 20.0
    decode_batch_factor: float = 0.01
    prefill_ms_per_token: float = 0.05
    output_len: int = 24
    scheduling_policy: str = "priority"  # vLLM's; the FIFO mode never sends a priority
    preempt_for_priority: bool = False  # vLLM V0's: a full batch makes room for a higher one

    def args(self) -> list[str]:
        extra = ["--preempt-for-priority"] if self.preempt_for_priority else []
        return [*extra,
            "--scheduling-policy", self.scheduling_policy,
            "--max-num-seqs", str(self.max_num_seqs),
            "--decode-ms-per-step", str(self.decode_ms_per_step),
            "--decode-batch-factor", str(self.decode_batch_factor),
            "--prefill-ms-per-token", str(self.prefill_ms_per_token),
            "--output-len", str(self.output_len), "--kv-blocks", "16384",
        ]  # fmt: skip


@contextmanager
def sim_process(engine: Engine, tmp: Path) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port), *engine.args()]
    log = (tmp / f"sim-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env())
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
        log.close()


def _admin(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@dataclass
class Gateway:
    url: str
    config_path: Path
    base_config: dict[str, Any]

    def team_key(self, name: str, tags: dict[str, str] | None = None) -> tuple[str, str]:
        """A team and a key in it: (team id, key)."""
        team = _admin(self.url, "POST", "/admin/teams", {"name": name, "tags": tags or {}})
        key = _admin(self.url, "POST", "/admin/keys", {"team": team["id"]})
        return team["id"], key["key"]

    def apply(self, scheduling: dict[str, Any]) -> None:
        """Write the config with this ``scheduling:`` section and reload it."""
        config = {**self.base_config, "scheduling": scheduling}
        self.config_path.write_text(yaml.safe_dump(config))
        _admin(self.url, "POST", "/admin/config/reload")

    def queues(self) -> Any:
        return _admin(self.url, "GET", "/admin/queues")


@contextmanager
def gateway_process(
    sim_url: str,
    pool_seqs: int | None,
    enabled: bool,
    tmp: Path,
    name: str,
    extra: dict[str, Any] | None = None,
) -> Iterator[Gateway]:
    """``fleetgate serve`` in front of ``sim_url``; the pool's ``max_num_seqs`` is
    ``pool_seqs``; ``enabled: false`` is the FIFO baseline (no scheduling stage)."""
    port = free_port()
    data = tmp / f"data-{name}"
    data.mkdir(parents=True, exist_ok=True)
    dep: dict[str, Any] = {
        "model": "tiny", "api_base": f"{sim_url}/v1", "engine": "vllm", "priority": True
    }  # fmt: skip
    if pool_seqs is not None:
        dep["max_num_seqs"] = pool_seqs
    base = {
        "models": [{"alias": "tiny", "deployments": [dep]}],
        "health": {"probe_interval_s": 30},
        "server": {"access_log": False},
        "tenancy": {"audit_requests": False, "spool_fsync": False},
        **(extra or {}),  # more sections (``batches:``)
    }
    path = tmp / f"gateway-{name}.yaml"
    path.write_text(yaml.safe_dump({**base, "scheduling": {"enabled": enabled}}))
    base_with_flag = {**base}
    cmd = [sys.executable, "-m", "fleetgate.cli.main", "serve", "--config", str(path),
           "--port", str(port), "--data-dir", str(data), "--no-watch"]  # fmt: skip
    env = {**_env(), "FLEETGATE_MASTER_KEY": MASTER}
    log = (tmp / f"gateway-{name}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/live", proc, timeout=60)
        yield Gateway(f"http://127.0.0.1:{port}", path, base_with_flag)
    finally:
        stop(proc)
        log.close()
