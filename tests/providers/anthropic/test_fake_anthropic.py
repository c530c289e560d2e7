"""The fake Anthropic server, driven by the official ``anthropic`` SDK.

If the SDK accepts the fake's JSON and events and rebuilds the same message from the stream as
from the plain answer, the fake speaks the real wire format and the translation tests that use
it mean something.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.providers.anthropic.fake_anthropic import (
    FakeAnthropic,
    message_events,
    text_message,
    thinking_message,
    tool_use_message,
)

KEY = "sk-ant-test"
WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=KEY)
    async with server:
        yield server


@pytest.fixture
async def client(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key=KEY, max_retries=0)
    yield sdk
    await sdk.close()


async def test_context_manager_returns_a_local_base_url() -> None:
    async with FakeAnthropic() as url:
        assert url.startswith("http://127.0.0.1:")


async def test_plain_text_reply_parses_in_the_sdk(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.queue_message(text_message("Hi there!", input_tokens=25, output_tokens=5))
    msg = await client.messages.create(model="claude-x", max_tokens=64, messages=HELLO)
    assert msg.content[0].type == "text" and msg.content[0].text == "Hi there!"
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (25, 5)
    sent = fake.received[0]
    assert KEY in (sent.headers.get("x-api-key"), sent.headers.get("Authorization", "")[7:])
    assert sent.headers["anthropic-version"]
    assert sent.body["messages"] == HELLO


async def test_echo_when_nothing_is_queued(client: anthropic.AsyncAnthropic) -> None:
    msg = await client.messages.create(model="claude-x", max_tokens=64, messages=HELLO)
    assert msg.content[0].type == "text" and msg.content[0].text == "echo: Hello"


@pytest.mark.parametrize(
    "message",
    [
        text_message("The quick brown fox jumps over the lazy dog."),
        tool_use_message(
            "get_weather", {"location": "San Francisco, CA", "unit": "f"}, text="Okay,"
        ),
        thinking_message("27 * 453: 27*400 = 10800, 27*50 = 1350, 27*3 = 81", "12,231"),
    ],
    ids=["text", "tool_use", "thinking"],
)
async def test_stream_rebuilds_the_same_message_as_the_plain_answer(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic, message: dict[str, Any]
) -> None:
    fake.queue_message(message)
    fake.queue_message(message)
    plain = await client.messages.create(
        model="claude-x", max_tokens=64, messages=HELLO, tools=[WEATHER_TOOL]
    )
    seen: list[str] = []
    async with client.messages.stream(
        model="claude-x", max_tokens=64, messages=HELLO, tools=[WEATHER_TOOL]
    ) as stream:
        async for event in stream:
            seen.append(event.type)
        streamed = await stream.get_final_message()
    assert streamed.model_dump() == plain.model_dump()
    assert seen[0] == "message_start" and seen[-1] == "message_stop"
    assert fake.received[1].body["stream"] is True


async def test_tool_use_stream_follows_the_published_event_sequence(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # Anthropic's documented tool-use stream: text block, ping after the first block start,
    # then a tool_use block whose input arrives as input_json_delta fragments, the first empty.
    message = tool_use_message(
        "get_weather", {"location": "San Francisco, CA"}, text="Okay, let's check"
    )
    events = message_events(message)
    collapsed: list[str] = []
    for name, _ in events:
        if not (collapsed and collapsed[-1] == name == "content_block_delta"):
            collapsed.append(name)
    assert collapsed == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    fragments = [
        d["delta"]["partial_json"]
        for n, d in events
        if d.get("index") == 1 and n == "content_block_delta"
    ]
    assert fragments[0] == "" and len(fragments) > 2
    fake.queue_events(events)
    async with client.messages.stream(
        model="claude-x", max_tokens=64, messages=HELLO, tools=[WEATHER_TOOL]
    ) as stream:
        final = await stream.get_final_message()
    tool = final.content[1]
    assert tool.type == "tool_use" and tool.input == {"location": "San Francisco, CA"}
    assert final.stop_reason == "tool_use"


async def test_queued_529_is_an_overloaded_error_in_the_sdk(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.queue_error(529, "overloaded_error", "Overloaded")
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.create(model="claude-x", max_tokens=64, messages=HELLO)
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    # The queue moves on: the next call succeeds.
    ok = await client.messages.create(model="claude-x", max_tokens=64, messages=HELLO)
    assert ok.stop_reason == "end_turn"


async def test_queued_400_is_a_bad_request_in_the_sdk(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.queue_error(
        400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"
    )
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model="claude-x", max_tokens=64, messages=HELLO)
    assert "prompt is too long" in str(caught.value)


async def test_error_event_mid_stream_raises_in_the_sdk(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.queue_message(
        text_message("never finished"), stream_error=("overloaded_error", "Overloaded")
    )
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        async with client.messages.stream(
            model="claude-x", max_tokens=64, messages=HELLO
        ) as stream:
            async for _ in stream:
                pass


async def test_wrong_key_is_401(fake: FakeAnthropic) -> None:
    sdk = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="wrong", max_retries=0)
    try:
        with pytest.raises(anthropic.AuthenticationError):
            await sdk.messages.create(model="claude-x", max_tokens=64, messages=HELLO)
    finally:
        await sdk.close()


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
        ([{"role": "system", "content": "a"}], "role"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "non-empty"),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}],
            "tool_result",
        ),
    ],
    ids=["same-role-twice", "system-role", "empty-text", "orphan-tool-result"],
)
async def test_shapes_the_real_api_refuses_are_refused(
    client: anthropic.AsyncAnthropic, messages: list[dict[str, Any]], needle: str
) -> None:
    with pytest.raises(anthropic.BadRequestError, match=needle):
        await client.messages.create(model="claude-x", max_tokens=64, messages=messages)  # type: ignore[arg-type]
