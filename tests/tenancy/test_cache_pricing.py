"""Prompt-cache pricing through a real gateway: the usage shapes of OpenAI (and vLLM) and of
Anthropic, streamed and not, on every route, billed to the nano-dollar and shown in reports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestClient

from fleetgate.api.state import GATEWAY
from fleetgate.config.schema import Price
from fleetgate.sim import SimConfig, running_sim
from fleetgate.tenancy.money import cost_nusd
from fleetgate.tenancy.ports import TENANCY
from tests.conftest import AUTH, MASTER, GatewayFactory
from tests.fakes import FakeUpstream, Reply
from tests.providers.anthropic.fake_anthropic import FakeAnthropic, text_message

# Claude-like prices, USD per million tokens: cache reads at a tenth, writes at 1.25x.
PRICE = {
    "input_per_mtok": 3.0,
    "cached_input_per_mtok": 0.3,
    "cache_write_input_per_mtok": 3.75,
    "output_per_mtok": 15.0,
}
# OpenAI's (and vLLM's) shape: cached tokens are part of prompt_tokens.
OPENAI_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
}
# By hand: 86 fresh x 3000 + 1920 read x 300 + 300 out x 15000 nano-USD per token.
OPENAI_COST = 86 * 3000 + 1920 * 300 + 300 * 15000
# Anthropic's shape: input_tokens excludes cache reads and writes.
ANTHROPIC_COST = 50 * 3000 + 1000 * 300 + 200 * 3750 + 7 * 15000


def _config(api_base: str, provider: str = "openai", model: str = "up") -> dict[str, Any]:
    dep = {"provider": provider, "model": model, "api_base": api_base, "api_key": "ant-key",
           "price": PRICE}  # fmt: skip
    return {
        "models": [{"alias": "m", "deployments": [dep]}],
        "tenancy": {"spend_flush_interval_s": 0.05},
    }


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream("openai-shape") as up:
        yield up


def _cached_message() -> dict[str, Any]:
    return text_message(
        "Bonjour", input_tokens=50, output_tokens=7, cache_read=1000, cache_creation=200
    )


async def _report(client: TestClient[Any, Any]) -> dict[str, Any]:
    tenancy = client.server.app[GATEWAY].core.ports.require(TENANCY)
    assert tenancy is not None
    await tenancy.writer.flush()
    resp = await client.get("/admin/spend?group_by=alias", headers=AUTH)
    rows = (await resp.json())["data"]
    assert len(rows) == 1
    return dict(rows[0])


def test_cost_prices_reads_and_writes_apart() -> None:
    price = Price.model_validate(PRICE)
    assert cost_nusd(price, 2006, 300, 1920) == OPENAI_COST
    assert cost_nusd(price, 1250, 7, 1000, cache_write=200) == ANTHROPIC_COST
    plain = Price(input_per_mtok=1.0)
    assert cost_nusd(plain, 100, 0, 40, cache_write=30) == 100_000  # unset: input price
    # More cache than prompt is clamped: never a negative fresh share.
    assert cost_nusd(price, 100, 0, 80, cache_write=80) == 80 * 300 + 20 * 3750


def test_a_fraction_of_a_nano_dollar_per_token_is_rounded_once_per_request() -> None:
    # 0.0004 USD/Mtok is 0.4 nano-USD a token (the exact path); 0.15 is 150 (whole numbers)
    tiny = Price(input_per_mtok=0.0004, output_per_mtok=0.15)
    assert cost_nusd(tiny, 3, 2, 0) == 301  # 3 x 0.4 + 2 x 150 = 301.2, rounded once
    assert cost_nusd(tiny, 5, 0, 0) == 2  # 2.0 exactly
    whole = Price(input_per_mtok=0.15, output_per_mtok=0.6)
    cost = cost_nusd(whole, 1000, 10, 0)
    assert cost == 1000 * 150 + 10 * 600 and type(cost) is int
    assert cost_nusd(whole, 1000, 10, 0, batch=True) == cost  # no discount set
    half = Price(input_per_mtok=0.15, output_per_mtok=0.6, batch_discount=0.5)
    assert cost_nusd(half, 1001, 1, 0, batch=True) == 75_375  # (150,150 + 600) / 2


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("route", ["chat", "completions"])
async def test_openai_usage_shape_is_priced_exactly(
    gateway: GatewayFactory, fake_openai: FakeUpstream, stream: bool, route: str
) -> None:
    upstream = fake_openai
    upstream.queue(Reply("cached answer", usage=OPENAI_USAGE))
    client = await gateway(_config(upstream.url))
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0)
    if route == "chat":
        out: Any = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=stream
        )
    else:
        out = await sdk.completions.create(model="m", prompt="hi", stream=stream)
    if stream:
        _ = [c async for c in out]
    await sdk.close()
    row = await _report(client)
    assert row["spend_nusd"] == OPENAI_COST
    assert (row["input_tokens"], row["cached_tokens"], row["cache_write_tokens"]) == (2006, 1920, 0)


@pytest.mark.parametrize("stream", [True, False])
async def test_anthropic_usage_shape_is_priced_exactly(
    gateway: GatewayFactory, stream: bool
) -> None:
    """The Anthropic provider outbound, its reads and writes billed apart."""
    fake = FakeAnthropic(api_key="ant-key")
    async with fake as url:
        fake.queue_message(_cached_message())
        client = await gateway(_config(url, provider="anthropic"))
        sdk = openai.AsyncOpenAI(
            base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0
        )
        out: Any = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=stream
        )
        if stream:
            _ = [c async for c in out]
        await sdk.close()
        row = await _report(client)
    assert row["spend_nusd"] == ANTHROPIC_COST
    assert (row["input_tokens"], row["cached_tokens"], row["cache_write_tokens"]) == (
        1250,
        1000,
        200,
    )


@pytest.mark.parametrize("stream", [True, False])
async def test_messages_front_door_over_anthropic_reports_and_bills_the_cache(
    gateway: GatewayFactory, stream: bool
) -> None:
    """Anthropic SDK in, Anthropic upstream out: the client sees the same cache counts the
    upstream reported, and spend prices them."""
    fake = FakeAnthropic(api_key="ant-key")
    async with fake as url:
        fake.queue_message(_cached_message())
        client = await gateway(_config(url, provider="anthropic"))
        sdk = anthropic.AsyncAnthropic(
            base_url=str(client.make_url("")), api_key=MASTER, max_retries=0
        )
        kwargs: dict[str, Any] = {
            "model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}],
        }  # fmt: skip
        if stream:
            async with sdk.messages.stream(**kwargs) as s:
                message = await s.get_final_message()
        else:
            message = await sdk.messages.create(**kwargs)
        await sdk.close()
        row = await _report(client)
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (50, 1000)
    assert (usage.cache_creation_input_tokens, usage.output_tokens) == (200, 7)
    assert row["spend_nusd"] == ANTHROPIC_COST


async def test_prefix_cache_hits_of_the_vllm_simulator_are_billed_as_cached(
    gateway: GatewayFactory,
) -> None:
    """The simulator reports its prefix-cache hits as vLLM does
    (``prompt_tokens_details.cached_tokens``): a repeated long prompt, streamed, is billed
    with its cached share at the cached price, to the nano-dollar."""
    config = SimConfig(mode="echo", prefill_ms_per_token=0.01, decode_ms_per_step=0.5)
    async with running_sim(config) as url:
        client = await gateway(_config(f"{url}/v1", model="tiny"))
        # Two keys of one team: the gateway salts the engine's prefix cache per tenant (team).
        resp = await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)
        team = (await resp.json())["id"]
        keys, ids = [], []
        for _ in range(2):
            resp = await client.post("/admin/keys", json={"team": team}, headers=AUTH)
            made = await resp.json()
            keys.append(made["key"])
            ids.append(made["id"])
        usages = []
        for key in keys:  # the same prompt twice: the second finds its prefix cached
            sdk = openai.AsyncOpenAI(
                base_url=str(client.make_url("/v1")), api_key=key, max_retries=0
            )
            stream = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "word " * 300}],
                max_tokens=5, stream=True, stream_options={"include_usage": True},
            )  # fmt: skip
            usages.append([c.usage async for c in stream if c.usage is not None][-1])
            await sdk.close()
        tenancy = client.server.app[GATEWAY].core.ports.require(TENANCY)
        assert tenancy is not None
        await tenancy.writer.flush()
        resp = await client.get("/admin/spend?group_by=key", headers=AUTH)
        rows = {r["key"]: r for r in (await resp.json())["data"]}
    again = usages[1]
    assert again.prompt_tokens_details is not None
    cached = again.prompt_tokens_details.cached_tokens or 0
    assert cached > 0
    by_hand = (again.prompt_tokens - cached) * 3000 + cached * 300 + again.completion_tokens * 15000
    assert rows[ids[1]]["spend_nusd"] == by_hand and rows[ids[1]]["cached_tokens"] == cached
    assert rows[ids[0]]["cached_tokens"] == 0  # the first request found nothing cached


async def test_cache_breakpoints_reach_anthropic_and_writes_then_reads_are_billed(
    gateway: GatewayFactory,
) -> None:
    """An OpenAI-SDK client marks its long system prompt for caching (LiteLLM's
    ``cache_control`` convention); the Anthropic upstream gets the breakpoint, writes the
    cache on the first request and reads it on the second, and each is billed at its price."""
    fake = FakeAnthropic(api_key="ant-key")
    async with fake as url:
        fake.queue_message(text_message("One.", input_tokens=10, output_tokens=2,
                                        cache_creation=2000))  # fmt: skip
        fake.queue_message(text_message("Two.", input_tokens=12, output_tokens=2,
                                        cache_read=2000))  # fmt: skip
        client = await gateway(_config(url, provider="anthropic"))
        sdk = openai.AsyncOpenAI(
            base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0
        )
        system: Any = [{"type": "text", "text": "A long policy. " * 50,
                        "cache_control": {"type": "ephemeral"}}]  # fmt: skip
        for question in ("First?", "Second?"):
            await sdk.chat.completions.create(
                model="m", messages=[{"role": "system", "content": system},
                                     {"role": "user", "content": question}],
            )  # fmt: skip
        await sdk.close()
        row = await _report(client)
    sent = fake.received[0].body["system"]
    assert isinstance(sent, list) and sent[0]["cache_control"] == {"type": "ephemeral"}
    write = 10 * 3000 + 2000 * 3750 + 2 * 15000
    read = 12 * 3000 + 2000 * 300 + 2 * 15000
    assert row["spend_nusd"] == write + read
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (2000, 2000)
