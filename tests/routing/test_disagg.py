"""pd-disagg through the gateway: a prefill pool and a decode pool of simulated vLLM engines."""

from __future__ import annotations

from contextlib import AsyncExitStack

import aiohttp
from openai import AsyncOpenAI

from fleetgate.routing.disagg import prefill_body
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, MASTER, GatewayFactory

LONG = "Contract text. " + " ".join(f"term{i} holds" for i in range(400))
SIM = dict(model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.1, output_len=5,
           max_num_batched_tokens=256, kv_blocks=1024)  # fmt: skip


def test_the_prefill_half_asks_for_one_token_and_a_remote_decode() -> None:
    body = {"model": "chat", "messages": [], "stream": True, "max_tokens": 50, "n": 1,
            "max_completion_tokens": 50, "stream_options": {"include_usage": True}}  # fmt: skip
    out = prefill_body(body, "m", {"cache_salt": "s"})
    assert out["model"] == "m" and out["stream"] is False and out["cache_salt"] == "s"
    assert out["max_tokens"] == 1 == out["max_completion_tokens"]
    assert "stream_options" not in out and "n" not in out
    assert out["kv_transfer_params"] == {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
    assert body["max_tokens"] == 50  # the client's request is left as it was


async def _received(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(f"{url}/sim/stats") as resp:
        return int((await resp.json())["requests_received"])


async def test_long_prompts_prefill_on_one_pool_and_stream_from_the_other(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        p_url = await stack.enter_async_context(running_sim(SimConfig(**SIM)))  # type: ignore[arg-type]
        d_url = await stack.enter_async_context(running_sim(SimConfig(**SIM)))  # type: ignore[arg-type]
        http = await stack.enter_async_context(aiohttp.ClientSession())
        client = await gateway({
            "models": [{"alias": "chat", "strategy": "pd-disagg", "deployments": [
                {"model": "m", "api_base": f"{p_url}/v1", "name": "p0", "tags": ["prefill"]},
                {"model": "m", "api_base": f"{d_url}/v1", "name": "d0", "tags": ["decode"]}]}],
            "routing": {"scrape_interval_s": 0.05, "kv_aware": {"pd_min_prompt_tokens": 500}},
        })  # fmt: skip
        sdk = AsyncOpenAI(base_url=f"{client.make_url('/v1')}", api_key=MASTER)
        stream = await sdk.chat.completions.create(
            model="chat", stream=True, max_tokens=5,
            messages=[{"role": "user", "content": LONG}])  # fmt: skip
        chunks = [c async for c in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and chunks[-1].choices[0].finish_reason is not None
        assert await _received(http, p_url) == 1 and await _received(http, d_url) == 1

        short = await sdk.chat.completions.create(
            model="chat", max_tokens=5, messages=[{"role": "user", "content": "hello"}]
        )
        assert short.choices[0].message.content
        assert await _received(http, p_url) + await _received(http, d_url) == 3

        async with http.post(f"{p_url}/sim/faults", json={"error_rate": 1.0}) as resp:
            assert resp.status == 200
        again = await sdk.chat.completions.create(
            model="chat", max_tokens=5, messages=[{"role": "user", "content": LONG + " again"}]
        )
        assert again.choices[0].message.content  # served aggregated by the decode engine
        metrics = (await (await client.get("/metrics", headers=AUTH)).read()).decode()
        for mode in ("disaggregated", "aggregated-short", "aggregated-prefill-failed"):
            assert f'fleetgate_pd_requests_total{{alias="chat",mode="{mode}"}} 1' in metrics
        await sdk.close()
