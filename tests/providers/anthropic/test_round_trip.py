"""Round trips over HTTP: OpenAI request -> Anthropic wire -> fake Anthropic -> OpenAI shapes."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from fleetgate.errors import ContextWindowExceeded, UpstreamStatusError
from fleetgate.providers.anthropic import (
    AnthropicStreamTranslator,
    anthropic_error,
    anthropic_headers,
    anthropic_messages_url,
    anthropic_to_openai_response,
    openai_chat_to_anthropic,
)
from fleetgate.sse import SSEParser
from tests.providers.anthropic.fake_anthropic import FakeAnthropic, text_message, tool_use_message

KEY = "sk-ant-wire"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=KEY)
    async with server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(
    http: aiohttp.ClientSession, fake: FakeAnthropic, body: dict[str, Any]
) -> dict[str, Any]:
    """What an Anthropic provider does for a non-streaming OpenAI request."""
    payload = openai_chat_to_anthropic(body, "claude-upstream")
    async with http.post(
        anthropic_messages_url(fake.base_url), json=payload, headers=anthropic_headers(KEY)
    ) as r:
        data = await r.json()
        if r.status >= 400:
            raise anthropic_error(r.status, data)
    return anthropic_to_openai_response(data, body["model"])


async def call_stream(
    http: aiohttp.ClientSession, fake: FakeAnthropic, body: dict[str, Any], seed: int = 0
) -> list[dict[str, Any]]:
    """What an Anthropic provider does for a streaming request; bytes re-split at random."""
    payload = openai_chat_to_anthropic({**body, "stream": True}, "claude-upstream")
    async with http.post(
        anthropic_messages_url(fake.base_url), json=payload, headers=anthropic_headers(KEY)
    ) as r:
        assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = await r.read()
    rng = random.Random(seed)
    parser, translator = SSEParser(), AnthropicStreamTranslator(body["model"], include_usage=True)
    chunks: list[dict[str, Any]] = []
    pos = 0
    while pos < len(raw):
        step = rng.randint(1, 40)
        for event, data in parser.feed(raw[pos : pos + step]):
            chunks += translator.feed(event, json.loads(data))
        pos += step
    assert translator.finished
    return chunks


def accumulate(chunks: list[dict[str, Any]]) -> ChatCompletion:
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    return state.get_final_completion()


async def test_system_prompt_and_text_round_trip(
    http: aiohttp.ClientSession, fake: FakeAnthropic
) -> None:
    body = {
        "model": "my-alias",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_tokens": 20,
        "user": "alice",
    }
    out = await call(http, fake, body)
    completion = ChatCompletion.model_validate(out)
    assert completion.choices[0].message.content == "echo: hi"
    assert completion.model == "my-alias" and completion.choices[0].finish_reason == "stop"
    sent = fake.received[0].body
    assert sent["system"] == "Be brief." and sent["model"] == "claude-upstream"
    assert sent["metadata"] == {"user_id": "alice"} and sent["max_tokens"] == 20
    assert fake.received[0].headers["x-api-key"] == KEY


async def test_tool_use_both_ways(http: aiohttp.ClientSession, fake: FakeAnthropic) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
    fake.queue_message(tool_use_message("get_weather", {"city": "Oslo"}, tool_id="toolu_9"))
    first = await call(
        http,
        fake,
        {"model": "a", "messages": messages, "tools": [WEATHER], "tool_choice": "required"},
    )
    assert fake.received[0].body["tool_choice"] == {"type": "any"}
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Oslo"
    }
    # The client answers the tool call the OpenAI way; the fake refuses (400) unless the
    # translation makes a tool_result that answers the previous assistant tool_use.
    messages += [choice["message"], {"role": "tool", "tool_call_id": "toolu_9", "content": "-3C"}]
    fake.queue_message(text_message("Wear a coat."))
    second = await call(http, fake, {"model": "a", "messages": messages, "tools": [WEATHER]})
    assert second["choices"][0]["message"]["content"] == "Wear a coat."
    last_turn = fake.received[1].body["messages"][-1]
    assert last_turn == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "-3C"}],
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_stream_matches_non_stream(
    http: aiohttp.ClientSession, fake: FakeAnthropic, seed: int
) -> None:
    message = tool_use_message(
        "get_weather", {"city": "San Francisco, CA"}, text="Okay, let me check the weather"
    )
    fake.queue_message(message)
    fake.queue_message(message)
    body = {
        "model": "alias",
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [WEATHER],
    }
    plain = ChatCompletion.model_validate(await call(http, fake, body))
    chunks = await call_stream(http, fake, body, seed)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    streamed = accumulate(chunks)
    assert streamed.choices[0].message.content == plain.choices[0].message.content
    assert streamed.choices[0].finish_reason == plain.choices[0].finish_reason == "tool_calls"
    s_call, p_call = (
        streamed.choices[0].message.tool_calls[0],
        plain.choices[0].message.tool_calls[0],
    )  # type: ignore[index]
    assert (s_call.id, s_call.function.name) == (p_call.id, p_call.function.name)  # type: ignore[union-attr]
    assert json.loads(s_call.function.arguments) == json.loads(p_call.function.arguments)  # type: ignore[union-attr]
    assert chunks[-1]["usage"] == plain.usage.model_dump(exclude_none=True)  # type: ignore[union-attr]


async def test_overloaded_529_is_a_retryable_error(
    http: aiohttp.ClientSession, fake: FakeAnthropic
) -> None:
    fake.queue_error(529, "overloaded_error", "Overloaded")
    with pytest.raises(UpstreamStatusError) as caught:
        await call(http, fake, {"model": "a", "messages": [{"role": "user", "content": "x"}]})
    assert caught.value.retryable and caught.value.upstream_status == 529


async def test_prompt_too_long_reaches_the_client_as_context_length_exceeded(
    http: aiohttp.ClientSession, fake: FakeAnthropic
) -> None:
    fake.queue_error(
        400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"
    )
    with pytest.raises(ContextWindowExceeded) as caught:
        await call(http, fake, {"model": "a", "messages": [{"role": "user", "content": "x"}]})
    assert caught.value.to_dict()["error"]["code"] == "context_length_exceeded"


async def test_error_event_mid_stream_raises(
    http: aiohttp.ClientSession, fake: FakeAnthropic
) -> None:
    fake.queue_message(text_message("cut short"), stream_error=("overloaded_error", "Overloaded"))
    with pytest.raises(UpstreamStatusError) as caught:
        await call_stream(
            http, fake, {"model": "a", "messages": [{"role": "user", "content": "x"}]}
        )
    assert caught.value.upstream_status == 529
