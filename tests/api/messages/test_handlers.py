"""The Anthropic front door, driven by the official anthropic SDK: messages, streams, tools,
token counts and errors, in Anthropic's shapes, over an OpenAI-compatible upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import AUTH, MASTER, GatewayFactory, one_alias
from tests.fakes import FakeUpstream, Reply, Status


@pytest.fixture
async def sdk(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = await gateway(one_alias(upstream))
    async with anthropic.AsyncAnthropic(
        base_url=str(client.make_url("")).rstrip("/"), api_key=MASTER, max_retries=0
    ) as sdk:
        yield sdk


async def test_a_message_round_trip(sdk: anthropic.AsyncAnthropic, upstream: FakeUpstream) -> None:
    message = await sdk.messages.create(
        model="tiny",
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hi"}],
        stop_sequences=["END"],
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "tiny"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello there."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    sent = upstream.seen[-1].body  # what the OpenAI upstream received
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["max_tokens"] == 64 and sent["stop"] == ["END"] and sent["model"] == "up-model"


async def test_a_stream_is_anthropic_events(
    sdk: anthropic.AsyncAnthropic, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content="one two three four"))
    async with sdk.messages.stream(
        model="tiny", max_tokens=32, messages=[{"role": "user", "content": "count"}]
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "one two three four"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0 and final.id.startswith("msg_")


async def test_tool_use_comes_back_as_a_tool_use_block(
    sdk: anthropic.AsyncAnthropic, upstream: FakeUpstream
) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    tools: list[Any] = [{"name": "get_weather", "description": "Weather by city",
                         "input_schema": {"type": "object",
                                          "properties": {"city": {"type": "string"}}}}]  # fmt: skip
    for stream in (False, True):
        upstream.queue(Reply(tool_calls=[call], finish_reason="tool_calls"))
        kwargs: dict[str, Any] = {
            "model": "tiny", "max_tokens": 64, "tools": tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
        }  # fmt: skip
        if stream:
            async with sdk.messages.stream(**kwargs) as s:
                message = await s.get_final_message()
        else:
            message = await sdk.messages.create(**kwargs)
        block = message.content[-1]
        assert block.type == "tool_use" and block.name == "get_weather"
        assert block.input == {"city": "Paris"}
        assert message.stop_reason == "tool_use"
    assert upstream.seen[-1].body["tools"][0]["function"]["name"] == "get_weather"


async def test_errors_are_anthropic_errors(
    sdk: anthropic.AsyncAnthropic, upstream: FakeUpstream
) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        await sdk.messages.create(model="tiny", max_tokens=0, messages=[])
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        await sdk.messages.create(
            model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    wrong = sdk.with_options(api_key="sk-wrong")
    with pytest.raises(anthropic.AuthenticationError) as auth:
        await wrong.messages.create(
            model="tiny", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert auth.value.body["type"] == "error"  # type: ignore[index]
    upstream.queue(*[Status(500)] * 10)
    with pytest.raises(anthropic.APIStatusError) as failed:
        await sdk.messages.create(
            model="tiny", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.status_code == 502


async def test_a_failure_mid_stream_is_an_error_event(
    sdk: anthropic.AsyncAnthropic, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content="a b c d e f", fail_after_chunks=2))
    with pytest.raises(anthropic.APIStatusError):
        async with sdk.messages.stream(
            model="tiny", max_tokens=32, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            async for _ in stream.text_stream:
                pass


async def test_count_tokens_and_bearer_auth(
    sdk: anthropic.AsyncAnthropic, gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    counted = await sdk.messages.count_tokens(
        model="tiny", messages=[{"role": "user", "content": "How many tokens is this?"}]
    )
    assert counted.input_tokens > 0
    client: TestClient[Any, Any] = await gateway(one_alias(upstream))
    body = {"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    resp = await client.post("/v1/messages", json=body, headers=AUTH)
    assert resp.status == 200 and (await resp.json())["type"] == "message"
    resp = await client.post("/v1/messages", json=body)
    assert resp.status == 401
    assert (await resp.json())["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"stop_sequences": 5}, "stop_sequences"),
        ({"stop_sequences": [None]}, "stop_sequences"),
        ({"output_config": 5}, "output_config"),
        ({"output_config": "json"}, "output_config"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_odd_stop_sequences_or_output_config_are_400_not_500(
    gateway: GatewayFactory, upstream: FakeUpstream, path: str, change: dict[str, Any], param: str
) -> None:
    # list(5) and 5.get("format") raised inside the translation: an OpenAI-shaped 500.
    client = await gateway(one_alias(upstream))
    body = {"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post(path, json={**body, **change}, headers=AUTH)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert param in error["error"]["message"]
    assert not upstream.seen
