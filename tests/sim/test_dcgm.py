"""The simulator's DCGM-exporter-shaped endpoint follows its engine's batch."""

from __future__ import annotations

import asyncio

import aiohttp

from fleetgate.cost.dcgm import parse_dcgm
from fleetgate.sim import SimConfig, running_sim


async def test_dcgm_endpoint_is_idle_then_busy_while_a_request_runs() -> None:
    config = SimConfig(mode="random", decode_ms_per_step=5.0, output_len=200, max_num_seqs=10)
    async with running_sim(config) as url, aiohttp.ClientSession() as http:
        async with http.get(f"{url}/dcgm/metrics") as resp:
            assert resp.status == 200
            (idle,) = parse_dcgm(await resp.text())
        assert idle.util_pct == 0.0 and idle.uuid.startswith("GPU-")
        assert idle.fb_used_mib is not None and idle.fb_used_mib > 70000  # reserved when idle
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        request = asyncio.create_task(http.post(f"{url}/v1/chat/completions", json=body))
        busy = None
        for _ in range(100):  # at most a second
            await asyncio.sleep(0.01)
            async with http.get(f"{url}/dcgm/metrics") as resp:
                (busy,) = parse_dcgm(await resp.text())
            if busy.util_pct:
                break
        assert busy is not None and busy.util_pct == 37.0  # 30 + 70 * 1/10
        assert busy.uuid == idle.uuid
        (await request).release()
