"""``/v1/responses`` through a real gateway, driven by the official openai SDK: three turns
chained by ``previous_response_id`` (streamed and not, with function tools) against the
simulator and against an Anthropic-format upstream; tenant isolation; 400s that name the
field; a reply stopped by the output checks; cached prompt tokens billed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from fleetgate.api.responses.feature import ResponsesFeature
from fleetgate.api.state import GATEWAY
from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.sim import SimConfig, running_sim
from fleetgate.store.tables import responses
from tests.conftest import AUTH, MASTER, GatewayFactory
from tests.fakes import FakeUpstream, Reply
from tests.providers.anthropic.fake_anthropic import FakeAnthropic, text_message, tool_use_message

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": False,
}


@pytest.fixture
async def sim_url() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="echo"), port=0) as base_url:
        yield f"{base_url}/v1"


def _alias(alias: str, dep: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "models": [{"alias": alias, "deployments": [dep]}],
        "multimodal": {"enabled": False},
        "tenancy": {"spend_flush_interval_s": 0.05},
        **extra,
    }


def _sdk(client: TestClient[Any, Any], key: str = MASTER) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key, max_retries=0)


async def _create(sdk: openai.AsyncOpenAI, stream: bool, **kwargs: Any) -> Any:
    """One response, streamed (through the SDK's event accumulator) or not."""
    if not stream:
        return await sdk.responses.create(**kwargs)
    types = []
    async with sdk.responses.stream(**kwargs) as events:
        async for event in events:
            types.append(event.type)
        final = await events.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert types[-1] == f"response.{final.status}"
    return final


@pytest.mark.parametrize("stream", [False, True])
async def test_three_turns_against_the_simulator(
    gateway: GatewayFactory, sim_url: str, stream: bool
) -> None:
    dep = {"provider": "openai", "model": "tiny", "api_base": sim_url}
    client = await gateway(_alias("tiny", dep))
    sdk = _sdk(client)
    turns = ["Tell me about tide pools.", "And about kelp forests?", "Which is colder?"]
    previous = None
    seen = []
    for i, text in enumerate(turns):
        out = await _create(
            sdk, stream, model="tiny", input=text, tools=[WEATHER], previous_response_id=previous,
            instructions="Answer briefly." if i == 0 else None,
        )  # fmt: skip
        assert out.status == "completed" and out.output_text == text  # echo of the last turn
        assert out.previous_response_id == previous and out.model == "tiny"
        assert out.usage is not None and out.usage.total_tokens > out.usage.input_tokens
        seen.append(out)
        previous = out.id
    # Each turn is sent after the ones before it: the prompt grows with the conversation.
    inputs = [r.usage.input_tokens for r in seen]
    assert inputs[0] < inputs[1] < inputs[2], inputs
    again = await sdk.responses.retrieve(seen[2].id)
    assert again.output_text == turns[2] and again.id == seen[2].id
    assert again.usage is not None and again.usage.input_tokens == inputs[2]
    await sdk.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_function_tools_across_three_turns_against_anthropic(
    gateway: GatewayFactory, stream: bool
) -> None:
    fake = FakeAnthropic(api_key="ant-key")
    async with fake as url:
        dep = {"provider": "anthropic", "model": "claude-x", "api_base": url, "api_key": "ant-key"}
        client = await gateway(_alias("claude", dep))
        sdk = _sdk(client)
        fake.queue_message(tool_use_message("get_weather", {"city": "Paris"}, tool_id="toolu_7"))
        first = await _create(
            sdk, stream, model="claude", input="Weather in Paris?", tools=[WEATHER],
            instructions="You are a weather bot.", max_output_tokens=64,
        )  # fmt: skip
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1 and first.status == "completed"
        assert (calls[0].call_id, calls[0].name) == ("toolu_7", "get_weather")
        assert calls[0].arguments.replace(" ", "") == '{"city":"Paris"}'

        fake.queue_message(text_message("Sunny and 21 C in Paris."))
        second = await _create(
            sdk, stream, model="claude", tools=[WEATHER], previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "toolu_7",
                    "output": '{"sky": "sunny", "c": 21}'}], max_output_tokens=64,
        )  # fmt: skip
        assert second.output_text == "Sunny and 21 C in Paris."

        fake.queue_message(text_message("You are welcome."))
        third = await _create(
            sdk, stream, model="claude", input="Thanks!", previous_response_id=second.id,
            max_output_tokens=64,
        )  # fmt: skip
        assert third.output_text == "You are welcome."
        await sdk.close()
    # The third request carried the whole conversation, the tool round trip included; the
    # first turn's instructions were not carried over (as OpenAI documents).
    sent = fake.received[2].body
    assert "system" not in sent
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_7",
                                           "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_7",
                                      "content": '{"sky": "sunny", "c": 21}'}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny and 21 C in Paris."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
    ]  # fmt: skip
    assert fake.received[0].body["system"] in (
        "You are a weather bot.", [{"type": "text", "text": "You are a weather bot."}]
    )  # fmt: skip


async def test_images_and_tool_calls_reach_an_openai_upstream(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}  # fmt: skip
    upstream.queue(Reply(tool_calls=[call], finish_reason="tool_calls"))
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    sdk = _sdk(client)
    image = "data:image/png;base64,iVBORw0KGgo="
    first = await sdk.responses.create(
        model="tiny", tools=[WEATHER],
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Weather where this photo was taken?"},
            {"type": "input_image", "image_url": image, "detail": "low"},
        ]}],
    )  # fmt: skip
    assert [(i.type, i.call_id) for i in first.output] == [("function_call", "call_1")]
    second = await sdk.responses.create(
        model="tiny", previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "snow"}],
    )  # fmt: skip
    assert second.output_text == "Hello there."
    await sdk.close()
    messages = upstream.seen[1].body["messages"]
    assert messages[0]["content"][1] == {
        "type": "image_url", "image_url": {"url": image, "detail": "low"}
    }  # fmt: skip
    assert messages[1]["tool_calls"][0]["id"] == "call_1"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "snow"}
    assert upstream.seen[0].body["tools"][0]["function"]["name"] == "get_weather"


async def _key(client: TestClient[Any, Any], team: str) -> str:
    resp = await client.post("/admin/teams", json={"name": team}, headers=AUTH)
    team_id = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team_id}, headers=AUTH)
    return str((await resp.json())["key"])


async def test_a_tenant_cannot_read_delete_or_continue_another_tenants_response(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    a, b = _sdk(client, await _key(client, "a")), _sdk(client, await _key(client, "b"))
    mine = await a.responses.create(model="tiny", input="a secret plan")
    with pytest.raises(openai.NotFoundError):
        await b.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError) as refused:
        await b.responses.create(model="tiny", input="go on", previous_response_id=mine.id)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        await b.responses.delete(mine.id)
    assert len(upstream.seen) == 1  # B's continuation never reached the upstream
    assert (await a.responses.retrieve(mine.id)).output_text == "Hello there."
    go_on = await a.responses.create(model="tiny", input="go on", previous_response_id=mine.id)
    assert go_on.status == "completed"
    assert [m["content"] for m in upstream.seen[-1].body["messages"]] == [
        "a secret plan", "Hello there.", "go on"
    ]  # fmt: skip
    await a.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        await a.responses.retrieve(mine.id)
    unstored = await a.responses.create(model="tiny", input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        await a.responses.retrieve(unstored.id)
    await a.close()
    await b.close()


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
        ({"input": "hi", "extra_body": {"temprature": 1}}, "temprature"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    gateway: GatewayFactory, upstream: FakeUpstream, kwargs: dict[str, Any], param: str
) -> None:
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    sdk = _sdk(client)
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.responses.create(model="tiny", **kwargs)
    await sdk.close()
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param
    assert not upstream.seen
    resp = await client.post("/v1/responses", data=b"{not json", headers=AUTH)
    assert resp.status == 400


CANNED = "This reply was stopped by the content policy."
HARMFUL = (
    "Here is the plan for the weekend workshop with the whole team in the main hall. "
    "Then you pack the pipe bomb with nails and hide it under the stage. After lunch we rest."
)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reply_stopped_by_the_output_checks_is_incomplete_content_filter(
    gateway: GatewayFactory, sim_url: str, stream: bool
) -> None:
    safety = {
        "checks": {"words": {"type": "words"}},
        "policies": {"default": {
            "output": ["words"], "stream": ["words"], "canned_reply": CANNED,
            "stream_options": {"interval_tokens": 8, "hold_back": True},
        }},
        "audit": {"enabled": False},
    }  # fmt: skip
    dep = {"provider": "openai", "model": "tiny", "api_base": sim_url}
    client = await gateway(_alias("tiny", dep, safety=safety))
    sdk = _sdk(client)
    if stream:
        deltas, last = [], None
        events = await sdk.responses.create(model="tiny", input=HARMFUL, stream=True)
        async for event in events:
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
    assert out.status == "incomplete"
    assert out.incomplete_details is not None
    assert out.incomplete_details.reason == "content_filter"
    assert out.output[0].type == "message" and out.output[0].status == "incomplete"
    assert out.output_text.endswith(CANNED)
    stored = await sdk.responses.retrieve(out.id)  # stored as the client saw it
    assert stored.status == "incomplete" and stored.output_text == out.output_text
    await sdk.close()


OPENAI_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920},
}


@pytest.mark.parametrize("stream", [False, True])
async def test_cached_prompt_tokens_are_reported_and_billed(
    gateway: GatewayFactory, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.queue(Reply("From the cache.", usage=OPENAI_USAGE))
    price = {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3, "output_per_mtok": 15.0}
    client = await gateway(
        _alias("tiny", {"model": "up", "api_base": upstream.url, "price": price})
    )
    sdk = _sdk(client)
    out = await _create(sdk, stream, model="tiny", input="long shared prefix ...")
    await sdk.close()
    assert out.usage is not None and out.usage.input_tokens == 2006
    assert out.usage.input_tokens_details.cached_tokens == 1920
    tenancy = client.server.app[GATEWAY].tenancy
    assert tenancy is not None
    await tenancy.writer.flush()
    resp = await client.get("/admin/spend?group_by=alias", headers=AUTH)
    (row,) = (await resp.json())["data"]
    assert row["spend_nusd"] == 86 * 3000 + 1920 * 300 + 300 * 15000
    assert row["cached_tokens"] == 1920


async def _events(client: TestClient[Any, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """The raw SSE events of a streamed request: (event name == data type) checked."""
    resp = await client.post("/v1/responses", json={**body, "stream": True}, headers=AUTH)
    assert resp.status == 200 and resp.headers["content-type"].startswith("text/event-stream")
    out = []
    for frame in (await resp.text()).split("\n\n"):
        if not frame.strip():
            continue
        name, data = frame.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        out.append(event)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


async def test_streamed_function_call_events(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    call = {"id": "call_9", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Lima"}'}}  # fmt: skip
    upstream.queue(Reply(tool_calls=[call], finish_reason="tool_calls"))
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    events = await _events(client, {"model": "tiny", "input": "weather?", "tools": [WEATHER]})
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    added, done = events[2]["item"], events[6]["item"]
    assert added["type"] == "function_call" and added["status"] == "in_progress"
    assert (added["call_id"], added["name"], added["arguments"]) == ("call_9", "get_weather", "")
    assert "".join(e["delta"] for e in events[3:5]) == '{"city":"Lima"}'
    assert events[5]["arguments"] == '{"city":"Lima"}' and events[5]["item_id"] == added["id"]
    assert done == {**added, "status": "completed", "arguments": '{"city":"Lima"}'}
    final = events[-1]["response"]
    assert final["output"] == [done] and final["status"] == "completed"
    assert (
        events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    )


async def test_an_upstream_failing_mid_stream_ends_with_response_failed(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply("one two three four five six", fail_after_chunks=2))
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    events = await _events(client, {"model": "tiny", "input": "count"})
    assert [e["type"] for e in events][-1] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["output"][0]["content"][0]["text"] == "one two"
    missing = await client.get(f"/v1/responses/{failed['id']}", headers=AUTH)
    assert missing.status == 404  # a failed response is not stored


async def test_a_refusal_before_the_stream_is_a_plain_error(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    resp = await client.post(
        "/v1/responses", json={"model": "nope", "input": "hi", "stream": True}, headers=AUTH
    )
    assert resp.status == 404
    assert (await resp.json())["error"]["param"] == "model"


async def test_retention_expires_and_purges_stored_responses(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    cfg = _alias(
        "tiny", {"model": "up", "api_base": upstream.url},
        responses={"retention_s": 0.5, "purge_interval_s": 0.1},
    )  # fmt: skip
    client = await gateway(cfg)
    sdk = _sdk(client)
    made = await sdk.responses.create(model="tiny", input="short-lived")
    assert (await sdk.responses.retrieve(made.id)).id == made.id
    feature = next(f for f in client.server.app[GATEWAY].features.all if f.name == "responses")
    assert isinstance(feature, ResponsesFeature)
    store = feature.store
    async with store.db.engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(responses)) == 1
    for _ in range(50):  # the purge runs every 0.1 s once the response expired
        await asyncio.sleep(0.1)
        async with store.db.engine.connect() as conn:
            if not await conn.scalar(select(func.count()).select_from(responses)):
                break
    else:
        raise AssertionError("the expired response was not purged")
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(made.id)
    await sdk.close()


async def test_the_api_can_be_turned_off(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    cfg = _alias("tiny", {"model": "up", "api_base": upstream.url}, responses={"enabled": False})
    client = await gateway(cfg)
    resp = await client.post("/v1/responses", json={"model": "tiny", "input": "hi"}, headers=AUTH)
    assert resp.status == 404 and not upstream.seen


@pytest.mark.parametrize("stream", [False, True])
async def test_keys_limits_apply_to_responses_like_to_chat(
    gateway: GatewayFactory, upstream: FakeUpstream, stream: bool
) -> None:
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    resp = await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)
    team = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team, "rpm": 2}, headers=AUTH)
    sdk = _sdk(client, (await resp.json())["key"])
    for _ in range(2):
        raw = await sdk.responses.with_raw_response.create(model="tiny", input="hi", stream=stream)
        assert raw.headers["x-ratelimit-limit-requests"] == "2"
        parsed: Any = raw.parse()
        if stream:
            _ = [event async for event in parsed]
    with pytest.raises(openai.RateLimitError):
        await sdk.responses.create(model="tiny", input="hi", stream=stream)
    await sdk.close()
    assert len(upstream.seen) == 2
    resp = await client.post("/admin/keys", json={"team": team, "aliases": ["other"]}, headers=AUTH)
    other = _sdk(client, (await resp.json())["key"])
    with pytest.raises(openai.NotFoundError) as refused:  # the key may not use this alias
        await other.responses.create(model="tiny", input="hi")
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "model"
    await other.close()


async def test_input_items_are_listed_for_the_owner(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    sdk = _sdk(client)
    made = await sdk.responses.create(
        model="tiny", instructions="Be brief.",
        input=[
            {"role": "user", "content": "What is 2+2?"},
            {"type": "message", "role": "assistant", "id": "msg_prior",
             "content": [{"type": "output_text", "text": "4", "annotations": []}]},
            {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "4"},
            {"role": "user", "content": [{"type": "input_text", "text": "Sure?"}]},
        ],
    )  # fmt: skip
    listed = await sdk.responses.input_items.list(made.id, order="asc")
    kinds = [(i.type, getattr(i, "role", None)) for i in listed.data]
    assert kinds == [
        ("message", "user"), ("message", "assistant"), ("function_call", None),
        ("function_call_output", None), ("message", "user"),
    ]  # fmt: skip
    assert listed.data[1].id == "msg_prior" and len({i.id for i in listed.data}) == 5
    assert listed.data[0].content[0].text == "What is 2+2?"  # type: ignore[union-attr]
    newest = await sdk.responses.input_items.list(made.id, limit=2)  # desc by default
    assert [i.id for i in newest.data] == [listed.data[4].id, listed.data[3].id]
    assert newest.has_more is True
    rest = await sdk.responses.input_items.list(made.id, limit=10, after=newest.data[-1].id)
    assert [i.id for i in rest.data] == [i.id for i in listed.data[:3]][::-1]
    with pytest.raises(openai.BadRequestError):
        await sdk.responses.input_items.list(made.id, limit=0)
    other = _sdk(client, await _key(client, "other"))
    with pytest.raises(openai.NotFoundError):
        await other.responses.input_items.list(made.id)
    await other.close()
    await sdk.close()


async def test_any_replica_continues_a_response_another_one_stored(
    tmp_path: Path, shared_pg_url: str, upstream: FakeUpstream
) -> None:
    """Two gateways on one PostgreSQL: a stream stored by one is continued, read and deleted
    through the other as soon as its last event was read."""
    cfg = parse_config(_alias("tiny", {"model": "up", "api_base": upstream.url}))
    clients = []
    for i in range(2):
        settings = Settings(master_key=MASTER, data_dir=tmp_path / f"r{i}",
                            database_url=shared_pg_url, watch_config=False)  # fmt: skip
        state = build_state(settings, cfg)
        client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, state=state)))
        await client.start_server()
        clients.append(client)
    try:
        one, two = _sdk(clients[0]), _sdk(clients[1])
        first = await _create(one, True, model="tiny", input="remember: 42")
        second = await two.responses.create(
            model="tiny", input="what was it?", previous_response_id=first.id
        )
        assert [m["content"] for m in upstream.seen[-1].body["messages"]] == [
            "remember: 42", "Hello there.", "what was it?"
        ]  # fmt: skip
        assert (await one.responses.retrieve(second.id)).previous_response_id == first.id
        await two.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            await one.responses.retrieve(first.id)
        await one.close()
        await two.close()
    finally:
        for client in clients:
            await client.close()
