"""``/v1/responses`` through a real gateway, driven by the official openai SDK: three turns
chained by ``previous_response_id`` (streamed and not, with function tools) against the
simulator and against an Anthropic-format upstream; 400s that name the field; a reply stopped
by the output checks; streamed events; failures; limits; cached prompt tokens billed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient

from fleetgate.api.state import GATEWAY
from fleetgate.sim import SimConfig, running_sim
from fleetgate.tenancy.ports import TENANCY
from tests.api.responses.support import WEATHER, alias_config, create, sdk_for
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Reply
from tests.providers.anthropic.fake_anthropic import FakeAnthropic, text_message, tool_use_message


@pytest.fixture
async def sim_url() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="echo"), port=0) as base_url:
        yield f"{base_url}/v1"


@pytest.mark.parametrize("stream", [False, True])
async def test_three_turns_against_the_simulator(
    gateway: GatewayFactory, sim_url: str, stream: bool
) -> None:
    dep = {"provider": "openai", "model": "tiny", "api_base": sim_url}
    client = await gateway(alias_config("tiny", dep))
    sdk = sdk_for(client)
    turns = ["Tell me about tide pools.", "And about kelp forests?", "Which is colder?"]
    previous = None
    seen = []
    for i, text in enumerate(turns):
        out = await create(
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
        client = await gateway(alias_config("claude", dep))
        sdk = sdk_for(client)
        fake.queue_message(tool_use_message("get_weather", {"city": "Paris"}, tool_id="toolu_7"))
        first = await create(
            sdk, stream, model="claude", input="Weather in Paris?", tools=[WEATHER],
            instructions="You are a weather bot.", max_output_tokens=64,
        )  # fmt: skip
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1 and first.status == "completed"
        assert (calls[0].call_id, calls[0].name) == ("toolu_7", "get_weather")
        assert calls[0].arguments.replace(" ", "") == '{"city":"Paris"}'

        fake.queue_message(text_message("Sunny and 21 C in Paris."))
        second = await create(
            sdk, stream, model="claude", tools=[WEATHER], previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "toolu_7",
                    "output": '{"sky": "sunny", "c": 21}'}], max_output_tokens=64,
        )  # fmt: skip
        assert second.output_text == "Sunny and 21 C in Paris."

        fake.queue_message(text_message("You are welcome."))
        third = await create(
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
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    sdk = sdk_for(client)
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
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    sdk = sdk_for(client)
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
    client = await gateway(alias_config("tiny", dep, safety=safety))
    sdk = sdk_for(client)
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
        alias_config("tiny", {"model": "up", "api_base": upstream.url, "price": price})
    )
    sdk = sdk_for(client)
    out = await create(sdk, stream, model="tiny", input="long shared prefix ...")
    await sdk.close()
    assert out.usage is not None and out.usage.input_tokens == 2006
    assert out.usage.input_tokens_details.cached_tokens == 1920
    tenancy = client.server.app[GATEWAY].core.ports.require(TENANCY)
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
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
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
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
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
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    resp = await client.post(
        "/v1/responses", json={"model": "nope", "input": "hi", "stream": True}, headers=AUTH
    )
    assert resp.status == 404
    assert (await resp.json())["error"]["param"] == "model"


async def test_the_api_can_be_turned_off(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    cfg = alias_config(
        "tiny", {"model": "up", "api_base": upstream.url}, responses={"enabled": False}
    )
    client = await gateway(cfg)
    resp = await client.post("/v1/responses", json={"model": "tiny", "input": "hi"}, headers=AUTH)
    assert resp.status == 404 and not upstream.seen


@pytest.mark.parametrize("stream", [False, True])
async def test_keys_limits_apply_to_responses_like_to_chat(
    gateway: GatewayFactory, upstream: FakeUpstream, stream: bool
) -> None:
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    resp = await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)
    team = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team, "rpm": 2}, headers=AUTH)
    sdk = sdk_for(client, (await resp.json())["key"])
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
    other = sdk_for(client, (await resp.json())["key"])
    with pytest.raises(openai.NotFoundError) as refused:  # the key may not use this alias
        await other.responses.create(model="tiny", input="hi")
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "model"
    await other.close()
