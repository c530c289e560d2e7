"""``GET /sim/timings``: where each request spent its time in the simulated engine."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from fleetgate.sim import SimConfig, running_sim


def _body(tokens: int) -> dict[str, object]:
    return {
        "model": "tiny",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "messages": [{"role": "user", "content": "hello there"}],
    }


async def _send(s: aiohttp.ClientSession, url: str, rid: str, tokens: int) -> None:
    headers = {"x-request-id": rid}
    async with s.post(f"{url}/v1/chat/completions", json=_body(tokens), headers=headers) as r:
        assert r.status == 200
        await r.read()


async def test_a_request_waiting_for_a_full_batch_shows_its_engine_queue_time() -> None:
    config = SimConfig(decode_ms_per_step=10.0, max_num_seqs=1)
    async with running_sim(config) as url, aiohttp.ClientSession() as s:
        before = time.monotonic()
        first = asyncio.create_task(_send(s, url, "first", 10))
        await asyncio.sleep(0.03)
        await _send(s, url, "second", 2)
        await first
        async with s.get(f"{url}/sim/timings") as r:
            records = {t["request_id"]: t for t in await r.json()}
    one, two = records["first"], records["second"]
    for t in (one, two):  # the host's monotonic clock, in order
        assert before <= t["arrival"] <= t["scheduled"] <= t["first_token"] <= t["ended"]
        assert t["preemptions"] == 0 and t["priority"] == 0
    assert (one["generated"], two["generated"]) == (10, 2)
    assert two["running_at_arrival"] == 1  # the batch (1 sequence) was full
    assert two["scheduled"] - two["arrival"] >= 0.04  # it waited for "first" to end
    assert one["scheduled"] - one["arrival"] < 0.03
