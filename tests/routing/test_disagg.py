"""pd-disagg through the gateway: a prefill pool and a decode pool of simulated vLLM engines."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import aiohttp
from openai import AsyncOpenAI

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.disagg import prefill_body
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, MASTER, GatewayFactory
from tests.resources.support import outbound

__all__ = ["outbound"]

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
        # served aggregated on the decode pool: a prefill engine would decode it between its
        # long prefill chunks
        assert await _received(http, p_url) == 1 and await _received(http, d_url) == 2

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


def test_decode_goes_where_the_request_fits_then_to_the_smallest_batch(
    outbound: OutboundHttp,
) -> None:
    import random

    from fleetgate.config.schema import DeploymentConfig, RoutingConfig
    from fleetgate.routing.deployment import Deployment
    from fleetgate.routing.disagg import DisaggStrategy
    from fleetgate.routing.engine_aware import EngineAwareRouting
    from fleetgate.routing.engine_metrics import EngineSnapshot
    from fleetgate.routing.engine_stats import EngineStats, engine_key
    from tests.routing.support import route_ctx

    config = RoutingConfig()
    shared = EngineAwareRouting(
        config,
        EngineStats(config, lambda: (), http=outbound),
        secret=b"k",
        rng=random.Random(1),
        http=outbound,
    )
    provider: Any = None
    full, busy, idle = (
        Deployment(name, "chat", DeploymentConfig(model="m", api_base=f"http://{name}/v1",
                                                  tags=("decode",)), provider)
        for name in ("full", "busy", "idle")
    )  # fmt: skip
    # 100 blocks of 16 tokens: "full" has 5% free (80 tokens), the others plenty.
    for dep, running, usage in ((full, 0, 0.95), (busy, 12, 0.3), (idle, 2, 0.6)):
        snap = EngineSnapshot("vllm", running=running, kv_usage=usage, block_size=16,
                              num_blocks=100, at=1e18)  # fmt: skip
        shared.stats.record(engine_key(dep), snap)
    strategy = DisaggStrategy(shared, "chat")
    ctx = route_ctx("chat", prompt_tokens=400, max_tokens=100)
    ctx.kv_transfer = {"do_remote_prefill": True, "remote_engine_id": "p0"}
    pick = strategy.pick([full, busy, idle], ctx)
    assert pick.deployment is idle  # "full" cannot hold 500 tokens; "idle" runs fewer
    assert pick.extra_body == {"kv_transfer_params": ctx.kv_transfer}
    assert pick.uncached_tokens == 0
    ctx.kv_transfer = None  # no prefill happened: aggregated, kv-aware over the decode pool
    assert strategy.pick([full, busy, idle], ctx).extra_body is None


def test_a_request_served_aggregated_goes_to_the_decode_pool_not_a_prefill_engine(
    outbound: OutboundHttp,
) -> None:
    import random

    from fleetgate.config.schema import DeploymentConfig, RoutingConfig
    from fleetgate.routing.deployment import Deployment
    from fleetgate.routing.disagg import DisaggStrategy
    from fleetgate.routing.engine_aware import EngineAwareRouting
    from fleetgate.routing.engine_stats import EngineStats
    from tests.routing.support import route_ctx

    config = RoutingConfig()
    shared = EngineAwareRouting(
        config,
        EngineStats(config, lambda: (), http=outbound),
        secret=b"k",
        rng=random.Random(1),
        http=outbound,
    )
    provider: Any = None
    prefill, decode = (
        Deployment(name, "chat", DeploymentConfig(model="m", api_base=f"http://{name}/v1",
                                                  tags=(name,)), provider)
        for name in ("prefill", "decode")
    )  # fmt: skip
    decode.state.in_flight = 5  # busier than the idle prefill engine, which kv-aware would pick
    strategy = DisaggStrategy(shared, "chat")
    ctx = route_ctx("chat", prompt_tokens=20, max_tokens=100)
    assert strategy.pick([prefill, decode], ctx).deployment is decode
    assert strategy.pick([prefill], ctx).deployment is prefill  # no decode engine: any engine
