"""The Anthropic adapter inside the gateway, against a local Messages-format server; driven by
the OpenAI SDK so both wire formats are checked by their official clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import MASTER, GatewayFactory
from tests.fakes import FakeUpstream
from tests.providers.anthropic.fake_anthropic import FakeAnthropic, text_message, tool_use_message


@pytest.fixture
async def anthropic_up() -> AsyncIterator[tuple[FakeAnthropic, str]]:
    fake = FakeAnthropic(api_key="ant-key")
    async with fake as url:
        yield fake, url


async def _sdk(gateway: GatewayFactory, cfg: dict[str, Any]) -> openai.AsyncOpenAI:
    client = await gateway(cfg)
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0)


def _cfg(url: str, **alias: Any) -> dict[str, Any]:
    dep = {"provider": "anthropic", "model": "claude-x", "api_base": url, "api_key": "ant-key"}
    return {"models": [{"alias": "claude", "deployments": [dep], **alias}]}


async def test_non_stream_with_system_prompt_and_usage(
    gateway: GatewayFactory, anthropic_up: tuple[FakeAnthropic, str]
) -> None:
    fake, url = anthropic_up
    fake.queue_message(text_message("Bonjour!", input_tokens=21, output_tokens=3, cache_read=5))
    sdk = await _sdk(gateway, _cfg(url))
    out = await sdk.chat.completions.create(
        model="claude",
        messages=[{"role": "system", "content": "Be French."},
                  {"role": "user", "content": "Hello"}],
        max_tokens=50,
    )  # fmt: skip
    await sdk.close()
    sent = fake.received[0]
    assert sent.body["system"] in ("Be French.", [{"type": "text", "text": "Be French."}])
    assert sent.body["model"] == "claude-x" and sent.body["max_tokens"] == 50
    assert sent.headers.get("x-api-key") == "ant-key"
    assert out.choices[0].message.content == "Bonjour!"
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.completion_tokens == 3
    assert out.usage.prompt_tokens == 26


async def test_stream_text_and_usage(
    gateway: GatewayFactory, anthropic_up: tuple[FakeAnthropic, str]
) -> None:
    fake, url = anthropic_up
    fake.queue_message(text_message("One two three four", stop_reason="max_tokens"))
    sdk = await _sdk(gateway, _cfg(url))
    stream = await sdk.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "count"}], stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [c async for c in stream]
    await sdk.close()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "One two three four"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_use_round_trip(
    gateway: GatewayFactory, anthropic_up: tuple[FakeAnthropic, str], stream: bool
) -> None:
    fake, url = anthropic_up
    fake.queue_message(tool_use_message("get_weather", {"city": "Paris", "unit": "c"}))
    sdk = await _sdk(gateway, _cfg(url))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
    kwargs: dict[str, Any] = {
        "model": "claude", "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": tools, "tool_choice": "required",
    }  # fmt: skip
    if stream:
        name, args = "", ""
        async for chunk in await sdk.chat.completions.create(**kwargs, stream=True):
            for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                name += call.function.name or "" if call.function else ""
                args += call.function.arguments or "" if call.function else ""
    else:
        out = await sdk.chat.completions.create(**kwargs)
        call = out.choices[0].message.tool_calls[0]  # type: ignore[index]
        name, args = call.function.name, call.function.arguments
        assert out.choices[0].finish_reason == "tool_calls"
    await sdk.close()
    assert fake.received[0].body["tool_choice"] == {"type": "any"}
    assert fake.received[0].body["tools"][0]["input_schema"]["properties"]["city"]
    assert name == "get_weather" and json.loads(args) == {"city": "Paris", "unit": "c"}


async def test_overloaded_anthropic_falls_back(
    gateway: GatewayFactory, anthropic_up: tuple[FakeAnthropic, str], upstream: FakeUpstream
) -> None:
    fake, url = anthropic_up
    for _ in range(5):
        fake.queue_error(529, "overloaded_error", "Overloaded")
    cfg = _cfg(url, fallbacks=["local"], num_retries=1)
    cfg["models"].append(
        {"alias": "local", "deployments": [{"model": "m", "api_base": upstream.url}]}
    )
    cfg["router"] = {"retry_backoff_s": 0.001}
    sdk = await _sdk(gateway, cfg)
    out = await sdk.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "hi"}]
    )
    await sdk.close()
    assert out.choices[0].message.content == "Hello there."
    assert len(fake.received) == 2


async def test_anthropic_client_error_is_a_400(
    gateway: GatewayFactory, anthropic_up: tuple[FakeAnthropic, str]
) -> None:
    fake, url = anthropic_up
    fake.queue_error(400, "invalid_request_error", "max_tokens: too large")
    sdk = await _sdk(gateway, _cfg(url))
    with pytest.raises(openai.BadRequestError, match="max_tokens: too large"):
        await sdk.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "hi"}]
        )
    await sdk.close()
