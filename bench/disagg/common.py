"""Processes and report plumbing shared by the disaggregated-serving benchmarks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "routing"))

from fleet import REPO, _env, gateway_process  # noqa: E402
from fleetgate.cli.processes import free_port, stop, wait_http  # noqa: E402

__all__ = ["MASTER", "REPO", "Sim", "gateway_process", "sim_fleet", "write_section"]

MASTER = "sk-bench-master"
DOCS = REPO / "docs" / "results" / "benchmarks.md"
SECTION = "## Disaggregated serving and KV events"


@dataclass(frozen=True)
class Sim:
    url: str
    events: str
    replay: str


@contextmanager
def sim_fleet(
    n: int, tmp: Path, *, kv_blocks: int, events: bool, seed: int = 0, extra: tuple[str, ...] = ()
) -> Iterator[list[Sim]]:
    """``n`` ``fleetgate sim`` processes (publishing KV events when ``events``)."""
    procs: list[subprocess.Popen[bytes]] = []
    sims: list[Sim] = []
    try:
        for i in range(n):
            port, pub, rep = free_port(), free_port(), free_port()
            cmd = [sys.executable, "-m", "fleetgate.cli.main", "sim", "--port", str(port),
                   "--model", "tiny", "--kv-blocks", str(kv_blocks), "--block-size", "16",
                   "--prefill-ms-per-token", "0.01", "--decode-ms-per-step", "0.5",
                   "--output-len", "4", "--seed", str(seed * 100 + i), *extra]  # fmt: skip
            # later flags win: ``extra`` overrides the timing above
            if events:
                cfg = {"enable_kv_cache_events": True, "publisher": "zmq",
                       "endpoint": f"tcp://127.0.0.1:{pub}",
                       "replay_endpoint": f"tcp://127.0.0.1:{rep}"}  # fmt: skip
                cmd += ["--kv-events-config", json.dumps(cfg)]
            log = (tmp / f"sim-{port}.log").open("wb")
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env()))
            log.close()
            sims.append(
                Sim(f"http://127.0.0.1:{port}", f"tcp://127.0.0.1:{pub}", f"tcp://127.0.0.1:{rep}")
            )
        for sim, proc in zip(sims, procs, strict=True):
            wait_http(f"{sim.url}/health", proc, timeout=60)
        yield sims
    finally:
        for proc in procs:
            stop(proc)


def write_section(title: str, body: str) -> None:
    """Put ``### title`` with ``body`` under this benchmark family's section of the docs."""
    text = DOCS.read_text()
    block = f"### {title}\n\n{body.strip()}\n"
    if SECTION not in text:
        text = text.rstrip() + f"\n\n{SECTION}\n\n{block}"
    else:
        start = text.index(SECTION)
        nxt = re.search(r"^## ", text[start + len(SECTION) :], re.M)
        end = start + len(SECTION) + nxt.start() if nxt else len(text)
        part = text[start:end]
        pattern = re.compile(rf"^### {re.escape(title)}\n.*?(?=^### |\Z)", re.M | re.S)
        part = (
            pattern.sub(block + "\n", part)
            if pattern.search(part)
            else part.rstrip() + "\n\n" + block
        )
        text = text[:start] + part.rstrip() + "\n" + ("\n" + text[end:] if nxt else "")
    DOCS.write_text(text)
