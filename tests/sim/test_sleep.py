"""The simulator's vLLM sleep mode and its log of received trace headers."""

from __future__ import annotations

import aiohttp

from fleetgate.sim import SimConfig, running_sim

BODY = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


async def test_sleep_wake_up_and_is_sleeping_like_vllm() -> None:
    async with running_sim(SimConfig(mode="echo")) as url, aiohttp.ClientSession() as s:
        async with s.get(f"{url}/is_sleeping") as r:
            assert await r.json() == {"is_sleeping": False}
        async with s.post(f"{url}/sleep", params={"level": "3"}) as r:
            assert r.status == 400
        async with s.post(f"{url}/sleep", params={"level": "1"}) as r:
            assert r.status == 200
        async with s.get(f"{url}/is_sleeping") as r:
            assert await r.json() == {"is_sleeping": True}
        async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
            assert r.status == 503
            assert (await r.json())["error"]["code"] == "engine_sleeping"
        async with s.post(f"{url}/wake_up") as r:
            assert r.status == 200
        async with s.get(f"{url}/is_sleeping") as r:
            assert await r.json() == {"is_sleeping": False}
        async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
            assert r.status == 200


async def test_received_trace_headers_are_recorded() -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with running_sim(SimConfig(mode="echo")) as url, aiohttp.ClientSession() as s:
        headers = {"traceparent": parent, "tracestate": "a=b"}
        async with s.post(f"{url}/v1/chat/completions", json=BODY, headers=headers) as r:
            assert r.status == 200
        async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
            assert r.status == 200
        async with s.get(f"{url}/sim/requests") as r:
            seen = await r.json()
    assert seen == [
        {"path": "/v1/chat/completions", "traceparent": parent, "tracestate": "a=b"},
        {"path": "/v1/chat/completions"},
    ]
