"""End to end: real `fleetgate sim` and `fleetgate serve` processes, driven with the official
OpenAI SDK (sync and async, stream and non-stream, tools, errors, disconnects)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.fakes import FakeUpstream, Reply
from tests.procs import metric_value, serve_process, sim_process

KEY = "sk-e2e-master"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("e2e")
    with (
        sim_process("--mode", "echo", "--decode-ms-per-step", "2") as echo,
        sim_process(
            "--mode", "random", "--decode-ms-per-step", "20", "--output-len", "200"
        ) as slow,
    ):
        config = {
            "models": [
                {"alias": "echo", "deployments": [{"model": "tiny", "api_base": echo}]},
                {"alias": "slow", "deployments": [{"model": "tiny", "api_base": slow}]},
                {"alias": "broken", "fallbacks": ["echo"],
                 "deployments": [{"model": "tiny", "api_base": "http://127.0.0.1:9/v1"}]},
            ]
        }  # fmt: skip
        with serve_process(config, tmp, master_key=KEY) as (url, _):
            yield {"gateway": url, "echo": echo, "slow": slow}


def _client(fleet: dict[str, str], key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=fleet["gateway"] + "/v1", api_key=key, max_retries=0)


def test_sync_non_stream_echo(fleet: dict[str, str]) -> None:
    out = _client(fleet).chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "the quick brown fox"}]
    )
    assert out.choices[0].message.content == "the quick brown fox"
    assert out.usage is not None and out.usage.completion_tokens > 0


def test_sync_stream_with_usage(fleet: dict[str, str]) -> None:
    stream = _client(fleet).chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "streams arrive in pieces"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streams arrive in pieces"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_async_stream_and_completions(fleet: dict[str, str]) -> None:
    client = openai.AsyncOpenAI(base_url=fleet["gateway"] + "/v1", api_key=KEY, max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "async hello"}], stream=True
        )
        text = ""
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        assert text == "async hello"
        done = await client.completions.create(model="echo", prompt="plain prompt", max_tokens=5)
        assert done.choices[0].text
        emb = await client.embeddings.create(model="echo", input=["a", "b"])
        assert len(emb.data) == 2
        models = await client.models.list()
        assert {m.id for m in models.data} == {"echo", "slow", "broken"}
    finally:
        await client.close()


def test_errors_through_the_sdk(fleet: dict[str, str]) -> None:
    with pytest.raises(openai.AuthenticationError):
        _client(fleet, key="wrong").models.list()
    with pytest.raises(openai.NotFoundError):
        _client(fleet).chat.completions.create(
            model="missing", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.BadRequestError) as info:
        _client(fleet).chat.completions.create(model="echo", messages=[])
    assert info.value.param == "messages"


def test_fallback_from_dead_alias(fleet: dict[str, str]) -> None:
    out = _client(fleet).chat.completions.create(
        model="broken", messages=[{"role": "user", "content": "saved by fallback"}]
    )
    assert out.choices[0].message.content == "saved by fallback"


def test_disconnect_mid_stream_reaches_the_engine(fleet: dict[str, str]) -> None:
    def cancelled() -> float:
        with urllib.request.urlopen(fleet["slow"].removesuffix("/v1") + "/metrics") as r:
            return metric_value(r.read().decode(), "fleetgate_sim_requests_cancelled_total")

    before = cancelled()
    stream = _client(fleet).chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "go"}], stream=True
    )
    next(iter(stream))
    stream.close()
    closed_at = time.monotonic()
    while cancelled() == before and time.monotonic() - closed_at < 2:
        time.sleep(0.01)
    assert cancelled() == before + 1
    assert time.monotonic() - closed_at < 1.0
    with urllib.request.urlopen(fleet["gateway"] + "/metrics") as r:
        text = r.read().decode()
    assert metric_value(text, "fleetgate_client_disconnects_total", alias="slow") >= 1


async def test_tool_calls_through_a_real_gateway(tmp_path: Path) -> None:
    function = {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}
    call = {"id": "call_1", "type": "function", "function": function}
    async with FakeUpstream("tools") as up:
        up.queue(Reply(tool_calls=[call], finish_reason="tool_calls"))
        config = {"models": [{"alias": "t", "deployments": [{"model": "m", "api_base": up.url}]}]}
        with serve_process(config, tmp_path, master_key=KEY) as (url, _):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
            tools = [{"type": "function", "function": {
                "name": "get_weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
            out = await client.chat.completions.create(
                model="t", messages=[{"role": "user", "content": "weather?"}],
                tools=tools, tool_choice="auto",  # type: ignore[arg-type]
            )  # fmt: skip
            await client.close()
        assert up.seen[0].body["tools"] == tools
        msg = out.choices[0].message
        assert msg.tool_calls and msg.tool_calls[0].function.name == "get_weather"
        assert out.choices[0].finish_reason == "tool_calls"
