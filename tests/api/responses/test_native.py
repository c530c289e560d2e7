"""``/v1/responses`` served natively by deployments with ``responses_api: native``: the
simulator's own ``/v1/responses`` driven by the official openai SDK over three turns (streamed
and not, with a function tool and ``previous_response_id`` resolved by the gateway), exact
usage billing, the output checks on a native stream, failures, an abandoned stream, and the
same limits as on the bridged path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from fleetgate.api.state import GATEWAY
from fleetgate.sim import SimConfig
from fleetgate.sim.runner import start_sim
from fleetgate.sim.state import SIM_STATE, SimState
from fleetgate.tenancy.ports import TENANCY
from tests.api.responses.support import WEATHER, alias_config, create, sdk_for
from tests.api.responses.test_gateway import CANNED, HARMFUL
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream
from tests.providers.responses.fake_native import FakeResponses, NativeReply


@pytest.fixture
async def sim() -> AsyncIterator[tuple[str, SimState]]:
    runner, base_url = await start_sim(SimConfig(mode="echo"))
    try:
        yield f"{base_url}/v1", runner.app[SIM_STATE]
    finally:
        await runner.cleanup()


@pytest.fixture
async def native() -> AsyncIterator[FakeResponses]:
    async with FakeResponses() as fake:
        yield fake


def _native(url: str, **extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "tiny", "api_base": url, "responses_api": "native",
            **extra}  # fmt: skip


async def _spend_rows(client: Any) -> list[dict[str, Any]]:
    tenancy = client.server.app[GATEWAY].core.ports.require(TENANCY)
    await tenancy.writer.flush()
    resp = await client.get("/admin/spend?group_by=alias", headers=AUTH)
    return list((await resp.json())["data"])


@pytest.mark.parametrize("stream", [False, True])
async def test_three_turns_with_a_tool_against_the_simulators_own_responses_api(
    gateway: GatewayFactory, sim: tuple[str, SimState], stream: bool
) -> None:
    url, state = sim
    client = await gateway(alias_config("tiny", _native(url)))
    sdk = sdk_for(client)
    first = await create(
        sdk, stream, model="tiny", input="Paris", tools=[WEATHER], tool_choice="required",
        instructions="You are a weather bot.",
    )  # fmt: skip
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and first.status == "completed"
    second = await create(
        sdk, stream, model="tiny", tools=[WEATHER], previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": "sunny and 21 C"}],
    )  # fmt: skip
    assert second.output_text == "sunny and 21 C"  # the simulator echoes the tool's output
    third = await create(sdk, stream, model="tiny", input="Thanks!", previous_response_id=second.id)
    assert third.output_text == "Thanks!" and third.previous_response_id == second.id
    inputs = [r.usage.input_tokens for r in (first, second, third)]
    assert inputs[0] < inputs[1] < inputs[2], inputs  # the gateway sent the whole conversation
    again = await sdk.responses.retrieve(third.id)
    assert again.output_text == "Thanks!" and again.usage.input_tokens == inputs[2]
    await sdk.close()
    # Every turn went to the simulator's /v1/responses (which refuses previous_response_id:
    # the gateway resolved it from its own store); none was bridged to chat.
    assert [h["path"] for h in state.received_headers] == ["/v1/responses"] * 3


async def test_the_upstream_request_is_built_from_the_gateways_state(
    gateway: GatewayFactory, native: FakeResponses
) -> None:
    native.queue(NativeReply(call=("call_7", "get_weather", '{"city":"Oslo"}')),
                 NativeReply(text="Snowing."))  # fmt: skip
    client = await gateway(alias_config("tiny", _native(native.url)))
    sdk = sdk_for(client)
    first = await sdk.responses.create(
        model="tiny", input="Weather in Oslo?", tools=[WEATHER], instructions="Be brief.",
        reasoning={"effort": "low"}, max_output_tokens=50, metadata={"run": "7"},
    )  # fmt: skip
    assert first.output[0].type == "function_call" and first.output[0].call_id == "call_7"
    assert first.id != "resp_upstream_1"  # the gateway's id: it owns the stored response
    second = await sdk.responses.create(
        model="tiny", previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_7", "output": "snow"}],
    )  # fmt: skip
    assert second.output_text == "Snowing."
    await sdk.close()
    sent = native.received
    assert sent[0]["instructions"] == "Be brief." and sent[0]["reasoning"] == {"effort": "low"}
    assert sent[0]["tools"][0]["name"] == "get_weather" and sent[0]["max_output_tokens"] == 50
    assert all(s["store"] is False and "previous_response_id" not in s for s in sent)
    assert "metadata" not in sent[0]  # the gateway's to echo, not the upstream's to keep
    assert sent[1]["input"] == [
        {"type": "message", "role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_7", "name": "get_weather",
         "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_7", "output": "snow"},
    ]  # fmt: skip
    assert "instructions" not in sent[1]  # not carried over, as OpenAI documents
    assert native.chat_requests == 0


USAGE = {
    "input_tokens": 2006,
    "input_tokens_details": {"cached_tokens": 1920},
    "output_tokens": 300,
    "output_tokens_details": {"reasoning_tokens": 40},
    "total_tokens": 2306,
}


@pytest.mark.parametrize("stream", [False, True])
async def test_native_usage_with_cached_tokens_is_billed_exactly(
    gateway: GatewayFactory, native: FakeResponses, stream: bool
) -> None:
    native.queue(NativeReply(text="From the cache.", usage=USAGE))
    price = {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3, "output_per_mtok": 15.0}
    client = await gateway(alias_config("tiny", _native(native.url, price=price)))
    sdk = sdk_for(client)
    out = await create(sdk, stream, model="tiny", input="long shared prefix ...")
    await sdk.close()
    assert out.output_text == "From the cache."
    assert out.usage.input_tokens == 2006 and out.usage.output_tokens == 300
    assert out.usage.input_tokens_details.cached_tokens == 1920
    assert out.usage.output_tokens_details.reasoning_tokens == 40
    (row,) = await _spend_rows(client)
    assert row["spend_nusd"] == 86 * 3000 + 1920 * 300 + 300 * 15000
    assert row["cached_tokens"] == 1920 and row["input_tokens"] == 2006


@pytest.mark.parametrize("stream", [False, True])
async def test_the_output_checks_stop_a_native_reply_as_a_content_filter(
    gateway: GatewayFactory, sim: tuple[str, SimState], stream: bool
) -> None:
    url, state = sim
    safety = {
        "checks": {"words": {"type": "words"}},
        "policies": {"default": {
            "output": ["words"], "stream": ["words"], "canned_reply": CANNED,
            "stream_options": {"interval_tokens": 8, "hold_back": True},
        }},
        "audit": {"enabled": False},
    }  # fmt: skip
    client = await gateway(alias_config("tiny", _native(url), safety=safety))
    sdk = sdk_for(client)
    if stream:
        deltas, last = [], None
        async for event in await sdk.responses.create(model="tiny", input=HARMFUL, stream=True):
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            last = event
        assert last is not None and last.type == "response.incomplete"
        out = last.response
        shown = "".join(deltas)
        assert shown.endswith(CANNED)
        assert not any(w in shown for w in ("pipe", "bomb", "nails")), shown
    else:
        out = await sdk.responses.create(model="tiny", input=HARMFUL)
    assert out.status == "incomplete" and out.incomplete_details.reason == "content_filter"
    assert out.output_text.endswith(CANNED) and "bomb" not in out.output_text
    stored = await sdk.responses.retrieve(out.id)  # stored as the client saw it, not completed
    assert stored.status == "incomplete" and stored.output_text == out.output_text
    await sdk.close()
    assert [h["path"] for h in state.received_headers] == ["/v1/responses"]
    await client.server.app[GATEWAY].core.ports.require(TENANCY).writer.flush()
    resp = await client.get("/admin/audit?kind=request", headers=AUTH)
    (row,) = (await resp.json())["data"]
    assert row["decision"] == "blocked"  # answered, but not audited as an allowed reply


async def _events(client: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = await client.post("/v1/responses", json={**body, "stream": True}, headers=AUTH)
    assert resp.status == 200
    frames = [f for f in (await resp.text()).split("\n\n") if f.strip()]
    return [json.loads(f.split("\n", 1)[1].removeprefix("data: ")) for f in frames]


async def test_a_native_stream_failing_midway_ends_with_response_failed_and_is_not_stored(
    gateway: GatewayFactory, native: FakeResponses
) -> None:
    native.queue(NativeReply(text="one two three four five", fail_after=2, chunk_delay=0.05))
    client = await gateway(alias_config("tiny", _native(native.url)))
    events = await _events(client, {"model": "tiny", "input": "count"})
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["error"]["code"] == "server_error"
    assert failed["output"][0]["content"][0]["text"] == "one two"
    missing = await client.get(f"/v1/responses/{failed['id']}", headers=AUTH)
    assert missing.status == 404


async def test_a_native_deployment_failing_first_falls_back_to_a_bridged_one(
    gateway: GatewayFactory, native: FakeResponses, upstream: FakeUpstream
) -> None:
    native.queue(NativeReply(http_status=500))
    config = {
        "models": [
            {"alias": "tiny", "deployments": [_native(native.url)], "fallbacks": ["chat"]},
            {"alias": "chat", "deployments": [{"model": "up", "api_base": upstream.url}]},
        ],
        "router": {"num_retries": 0},
        "multimodal": {"enabled": False},
    }
    client = await gateway(config)
    sdk = sdk_for(client)
    out = await sdk.responses.create(model="tiny", input="hi")
    await sdk.close()
    assert out.output_text == "Hello there." and len(native.received) == 1
    assert upstream.seen[0].path == "/v1/chat/completions"


async def test_an_abandoned_native_stream_is_billed_and_aborted_upstream(
    gateway: GatewayFactory, native: FakeResponses
) -> None:
    words = " ".join(f"w{i}" for i in range(200))
    native.queue(NativeReply(text=words, chunk_delay=0.02))
    price = {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}
    client = await gateway(alias_config("tiny", _native(native.url, price=price)))
    sdk = sdk_for(client)
    seen = 0
    async with await sdk.responses.create(model="tiny", input="talk", stream=True) as events:
        async for event in events:
            seen += event.type == "response.output_text.delta"
            if seen == 5:
                break  # the client goes away mid-stream
    await sdk.close()

    async def billed() -> list[dict[str, Any]]:
        for _ in range(100):  # bounded: 5 s
            rows = await _spend_rows(client)
            if rows:
                return rows
            await asyncio.sleep(0.05)
        raise AssertionError("the abandoned stream was never billed")

    (row,) = await billed()
    assert row["requests"] == 1 and row["output_tokens"] >= 5 and row["input_tokens"] > 0
    assert row["spend_nusd"] >= (row["input_tokens"] + 5) * 1_000_000
    for _ in range(100):  # bounded: 5 s
        if native.cancelled:
            break
        await asyncio.sleep(0.05)
    assert native.cancelled == 1  # the upstream request was aborted, not left generating


@pytest.mark.parametrize("api", ["native", "bridge"])
async def test_a_keys_limits_apply_the_same_on_native_and_bridged_paths(
    gateway: GatewayFactory, native: FakeResponses, upstream: FakeUpstream, api: str
) -> None:
    dep = _native(native.url) if api == "native" else {"model": "up", "api_base": upstream.url}
    client = await gateway(alias_config("tiny", dep))
    resp = await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)
    team = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team, "rpm": 2}, headers=AUTH)
    sdk = sdk_for(client, (await resp.json())["key"])
    for stream in (False, True):
        raw = await sdk.responses.with_raw_response.create(model="tiny", input="hi", stream=stream)
        assert raw.headers["x-ratelimit-limit-requests"] == "2"
        parsed: Any = raw.parse()
        if stream:
            _ = [event async for event in parsed]
    with pytest.raises(openai.RateLimitError):
        await sdk.responses.create(model="tiny", input="hi", stream=True)
    await sdk.close()
    sent = len(native.received) if api == "native" else len(upstream.seen)
    assert sent == 2 and native.chat_requests == 0
    resp = await client.post("/admin/keys", json={"team": team, "max_budget_usd": 0.0},
                             headers=AUTH)  # fmt: skip
    broke = sdk_for(client, (await resp.json())["key"])
    with pytest.raises(openai.RateLimitError) as refused:  # a spent budget, before any upstream
        await broke.responses.create(model="tiny", input="hi")
    assert isinstance(refused.value.body, dict) and refused.value.body["code"] is not None
    await broke.close()
    assert (len(native.received) if api == "native" else len(upstream.seen)) == 2
