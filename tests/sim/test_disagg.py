"""The simulator as the prefill and the decode engine of vLLM's disaggregated serving."""

from __future__ import annotations

from typing import Any

import aiohttp

from fleetgate.sim import SimConfig, running_sim

PROMPT = " ".join(f"w{i}" for i in range(1200))
CFG = dict(model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.1, output_len=3,
           max_num_batched_tokens=128, kv_blocks=1024)  # fmt: skip


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with http.post(f"{url}/v1/completions", json=body) as resp:
        return resp.status, await resp.json()


async def _steps(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(f"{url}/sim/stats") as resp:
        return int((await resp.json())["steps"])


async def test_prefill_answers_transfer_params_and_decode_skips_the_prefill() -> None:
    async with (
        running_sim(SimConfig(**CFG)) as p_url,  # type: ignore[arg-type]
        running_sim(SimConfig(**CFG)) as d_url,  # type: ignore[arg-type]
        aiohttp.ClientSession() as http,
    ):
        status, answer = await _post(http, p_url, {
            "model": "m", "prompt": PROMPT, "max_tokens": 1, "stream": False,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                   "remote_engine_id": None, "remote_block_ids": None,
                                   "remote_host": None, "remote_port": None}})  # fmt: skip
        assert status == 200
        params = answer["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
        assert params["remote_engine_id"] and params["remote_block_ids"]
        assert params["remote_port"] == int(p_url.rsplit(":", 1)[1])
        prefill_steps = await _steps(http, p_url)
        assert prefill_steps >= 1200 // 128  # the prompt was computed there, chunk by chunk

        decode = {"model": "m", "prompt": PROMPT, "max_tokens": 3, "kv_transfer_params": params}
        status, answer = await _post(http, d_url, decode)
        assert status == 200 and answer["usage"]["completion_tokens"] == 3
        assert await _steps(http, d_url) == 3  # one step per token: no prefill chunks
        assert "kv_transfer_params" not in answer
        async with http.get(f"{d_url}/sim/stats") as resp:
            pulled = (await resp.json())["kv_pulled_tokens"]
        assert pulled == answer["usage"]["prompt_tokens"]  # nothing was cached there yet
        # the same prompt again: the decode engine holds its blocks now and pulls only the
        # last, partial block (as vLLM's NIXL connector pulls only what the engine lacks)
        status, answer = await _post(http, d_url, decode)
        async with http.get(f"{d_url}/sim/stats") as resp:
            again = (await resp.json())["kv_pulled_tokens"] - pulled
        assert status == 200 and 0 < again <= 16


async def test_malformed_transfer_params_are_refused() -> None:
    async with running_sim(SimConfig(**CFG)) as url, aiohttp.ClientSession() as http:  # type: ignore[arg-type]
        for params in ("x", {"do_remote_prefill": True}):
            status, answer = await _post(http, url, {
                "model": "m", "prompt": "hi", "kv_transfer_params": params})  # fmt: skip
            assert status == 400 and answer["error"]["param"] == "kv_transfer_params"
