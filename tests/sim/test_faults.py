import asyncio
import json
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from fleetgate.sim import FaultConfig, SimConfig, running_sim

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "one two four"}]}


async def _stats(s: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with s.get(f"{url}/sim/stats") as resp:
        result: dict[str, Any] = await resp.json()
        return result


async def test_error_fault_from_header_with_retry_after() -> None:
    async with running_sim(SimConfig()) as url, aiohttp.ClientSession() as s:
        hdr = {"x-sim-fault": "error:429"}
        async with s.post(f"{url}/v1/chat/completions", json=BODY, headers=hdr) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
            assert (await resp.json())["error"]["type"] == "rate_limit_error"
        async with s.post(f"{url}/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 200
        assert (await _stats(s, url))["requests_faulted"] == 1


async def test_error_rate_flag_and_runtime_change() -> None:
    config = SimConfig(faults=FaultConfig(error_rate=1.0, error_status=503))
    async with running_sim(config) as url, aiohttp.ClientSession() as s:
        async with s.post(f"{url}/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 503
        async with s.post(f"{url}/sim/faults", json={"error_rate": 0}) as resp:
            assert (await resp.json())["error_rate"] == 0
        async with s.post(f"{url}/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 200
        async with s.post(f"{url}/sim/faults", json={"error_rate": 2}) as resp:
            assert resp.status == 400
        async with s.post(f"{url}/sim/faults", json={"nope": 1}) as resp:
            assert resp.status == 400


async def test_spike_delays_first_token() -> None:
    async with running_sim(SimConfig()) as url, aiohttp.ClientSession() as s:
        loop = asyncio.get_running_loop()
        start = loop.time()
        hdr = {"x-sim-fault": "spike:150"}
        async with s.post(f"{url}/v1/chat/completions", json=BODY, headers=hdr) as resp:
            assert resp.status == 200
        assert loop.time() - start >= 0.15


async def test_hang_never_answers_and_reset_drops_the_connection() -> None:
    async with running_sim(SimConfig()) as url, aiohttp.ClientSession() as s:
        timeout = aiohttp.ClientTimeout(total=0.2)
        with pytest.raises(asyncio.TimeoutError):
            hdr = {"x-sim-fault": "hang"}
            async with s.post(
                f"{url}/v1/chat/completions", json=BODY, headers=hdr, timeout=timeout
            ):
                pass
        with pytest.raises(aiohttp.ClientConnectionError):
            hdr = {"x-sim-fault": "reset"}
            async with s.post(f"{url}/v1/chat/completions", json=BODY, headers=hdr) as resp:
                await resp.read()


async def test_garbage_body_breaks_the_openai_client() -> None:
    config = SimConfig(faults=FaultConfig(garbage_rate=1.0))
    async with running_sim(config) as url:
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        async with client:
            # The SDK fails to parse the 200 body (json.JSONDecodeError is a ValueError).
            with pytest.raises(ValueError):
                await client.chat.completions.create(model="tiny", messages=BODY["messages"])
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{url}/v1/chat/completions", json=BODY) as r,
        ):
            assert r.status == 200
            with pytest.raises(ValueError):
                json.loads(await r.read())


async def test_midstream_failure_after_k_chunks_frees_the_engine() -> None:
    config = SimConfig(decode_ms_per_step=1.0, output_len=50)
    async with running_sim(config) as url, aiohttp.ClientSession() as s:
        hdr = {"x-sim-fault": "midstream:4"}
        body = {**BODY, "stream": True}
        received = b""
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(f"{url}/v1/chat/completions", json=body, headers=hdr) as resp:
                assert resp.status == 200
                async for chunk in resp.content.iter_any():
                    received += chunk
        events = [e for e in received.split(b"\n\n") if e]
        assert len(events) == 4
        assert all(json.loads(e[len(b"data: ") :])["object"] for e in events)
        await asyncio.sleep(0.02)
        stats = await _stats(s, url)
        assert stats["running"] == 0 and stats["kv_cache_usage"] == 0.0
        assert stats["requests_cancelled"] == 0
