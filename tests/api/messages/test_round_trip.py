"""The front door's translations over HTTP: an Anthropic SDK client against a /v1/messages
server that answers from an OpenAI-style upstream's completion and chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import pytest
from aiohttp import web

from fleetgate.api.messages.errors import fleetgate_error_to_anthropic
from fleetgate.api.messages.request import anthropic_request_to_openai
from fleetgate.api.messages.response import openai_response_to_anthropic
from fleetgate.api.messages.stream import OpenAIToAnthropicStream
from fleetgate.errors import FleetgateError
from fleetgate.sse import encode_sse

UPSTREAM_CHUNKS: list[dict[str, Any]] = [
    {
        "id": "chatcmpl-fd",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        ],
    },
    {
        "id": "chatcmpl-fd",
        "choices": [{"index": 0, "delta": {"content": "Let me"}, "finish_reason": None}],
    },
    {
        "id": "chatcmpl-fd",
        "choices": [{"index": 0, "delta": {"content": " check."}, "finish_reason": None}],
    },
    {
        "id": "chatcmpl-fd",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_7",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-fd",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]},
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-fd",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ' "Oslo"}'}}]},
                "finish_reason": None,
            }
        ],
    },
    {"id": "chatcmpl-fd", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {
        "id": "chatcmpl-fd",
        "choices": [],
        "usage": {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43},
    },
]
UPSTREAM_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-fd",
    "object": "chat.completion",
    "model": "upstream",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43},
}


@asynccontextmanager
async def front_door(seen: list[dict[str, Any]]) -> AsyncIterator[str]:
    async def messages(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        try:
            upstream_request = anthropic_request_to_openai(body)
        except FleetgateError as err:
            status, payload = fleetgate_error_to_anthropic(err)
            return web.json_response(payload, status=status)
        seen.append(upstream_request)
        if not upstream_request.get("stream"):
            return web.json_response(
                openai_response_to_anthropic(UPSTREAM_COMPLETION, body["model"])
            )
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        stream = OpenAIToAnthropicStream(body["model"])
        for chunk in UPSTREAM_CHUNKS:
            for event, data in stream.feed(chunk):
                await response.write(encode_sse(event, data))
        for event, data in stream.finish():
            await response.write(encode_sse(event, data))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_front_door_serves_the_anthropic_sdk_stream_and_non_stream() -> None:
    seen: list[dict[str, Any]] = []
    tool = {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    async with front_door(seen) as url:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="gateway-key", max_retries=0)
        try:
            kwargs: dict[str, Any] = {
                "model": "claude-alias",
                "max_tokens": 100,
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "Weather in Oslo?"}],
                "tools": [tool],
            }
            plain = await client.messages.create(**kwargs)
            async with client.messages.stream(**kwargs) as stream:
                streamed = await stream.get_final_message()
            with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
                await client.messages.create(**{**kwargs, "max_tokens": 0})
        finally:
            await client.close()
    assert streamed.model_dump() == plain.model_dump()
    assert plain.stop_reason == "tool_use" and plain.model == "claude-alias"
    assert [b.type for b in plain.content] == ["text", "tool_use"]
    assert plain.content[1].input == {"city": "Oslo"}  # type: ignore[union-attr]
    assert (plain.usage.input_tokens, plain.usage.output_tokens) == (31, 12)
    assert seen[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert seen[1]["stream_options"] == {"include_usage": True}
