import asyncio

import aiohttp

from fleetgate.sim import SimConfig, running_sim


async def _metric(s: aiohttp.ClientSession, url: str, line_start: str) -> float:
    async with s.get(f"{url}/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_start} not found")


async def test_client_disconnect_mid_stream_aborts_the_request() -> None:
    config = SimConfig(decode_ms_per_step=10.0, output_len=1000)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with running_sim(config) as url, aiohttp.ClientSession() as admin:
        async with aiohttp.ClientSession() as client:
            resp = await client.post(f"{url}/v1/chat/completions", json=body)
            await resp.content.readuntil(b"\n\n")
            await resp.content.readuntil(b"\n\n")
            running = 'vllm:num_requests_running{model_name="tiny"}'
            assert await _metric(admin, url, running) == 1
            resp.close()
        cancelled = 'fleetgate_sim_requests_cancelled_total{model_name="tiny"}'
        for _ in range(50):
            if await _metric(admin, url, cancelled) == 1:
                break
            await asyncio.sleep(0.01)
        assert await _metric(admin, url, cancelled) == 1
        assert await _metric(admin, url, running) == 0
        assert await _metric(admin, url, 'vllm:kv_cache_usage_perc{model_name="tiny"}') == 0
        async with admin.get(f"{url}/sim/stats") as r:
            assert (await r.json())["requests_cancelled"] == 1


async def test_client_disconnect_while_waiting_in_the_queue() -> None:
    config = SimConfig(decode_ms_per_step=10.0, output_len=1000, max_num_seqs=1)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with running_sim(config) as url, aiohttp.ClientSession() as admin:
        first = asyncio.create_task(admin.post(f"{url}/v1/chat/completions", json=body))
        async with aiohttp.ClientSession() as client:
            timeout = aiohttp.ClientTimeout(total=0.1)
            try:
                await client.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)
            except TimeoutError:
                pass
        waiting = 'vllm:num_requests_waiting{model_name="tiny"}'
        for _ in range(50):
            if await _metric(admin, url, waiting) == 0:
                break
            await asyncio.sleep(0.01)
        assert await _metric(admin, url, waiting) == 0
        first.cancel()
        try:
            await first
        except asyncio.CancelledError:
            pass
