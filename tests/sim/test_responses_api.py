"""The simulator's native ``/v1/responses``, driven by the official openai SDK: text and
function-call answers, streamed events, usage with prefix-cache hits, the output limit, no
stored state, and the mid-stream fault."""

from __future__ import annotations

import json

import openai
import pytest
from openai import AsyncOpenAI

from fleetgate.sim import SimConfig, running_sim

WEATHER = {
    "type": "function", "name": "get_weather", "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}  # fmt: skip


def _client(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base_url}/v1", api_key="sk-sim", max_retries=0, timeout=10)


async def test_a_text_answer_with_usage_and_prefix_cache_hits() -> None:
    async with running_sim(SimConfig(mode="echo")) as url, _client(url) as client:
        history = [
            {"role": "user", "content": "A long first question about tide pools " * 8},
            {"role": "assistant", "content": "A long first answer."},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "tool said so"},
        ]
        first = await client.responses.create(model="tiny", input=history, instructions="Hi.")
        assert first.status == "completed" and first.output_text == "tool said so"
        assert first.usage is not None and first.usage.output_tokens == 3  # tool| said| so
        assert first.usage.input_tokens_details.cached_tokens == 0
        again = await client.responses.create(
            model="tiny", instructions="Hi.", input=[*history, {"role": "user", "content": "More?"}]
        )
        assert again.output_text == "More?"
        assert again.usage is not None and again.usage.input_tokens > first.usage.input_tokens
        assert again.usage.input_tokens_details.cached_tokens >= 16  # the shared prefix's blocks
        cut = await client.responses.create(
            model="tiny", input="one two three", max_output_tokens=2
        )
        assert cut.status == "incomplete" and cut.output_text == "one two"
        assert cut.incomplete_details is not None
        assert cut.incomplete_details.reason == "max_output_tokens"


async def test_a_required_tool_is_called_and_streamed_as_responses_events() -> None:
    async with running_sim(SimConfig(mode="echo")) as url, _client(url) as client:
        kinds = []
        async with client.responses.stream(
            model="tiny", input="Lima", tools=[WEATHER], tool_choice="required"
        ) as events:
            async for event in events:
                kinds.append(event.type)
            final = await events.get_final_response()
        (call,) = final.output
        assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Lima"}
        assert kinds[:3] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
        ]
        assert kinds[-3:] == [
            "response.function_call_arguments.done", "response.output_item.done",
            "response.completed",
        ]  # fmt: skip
        assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"}
        text_kinds = [e.type async for e in await client.responses.create(
            model="tiny", input="plain words", stream=True)]  # fmt: skip
        assert "response.output_text.delta" in text_kinds
        assert "response.content_part.done" in text_kinds
        assert text_kinds[-1] == "response.completed"


async def test_it_keeps_no_state_and_refuses_previous_response_id() -> None:
    async with running_sim(SimConfig(mode="echo")) as url, _client(url) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="tiny", input="x", previous_response_id="resp_1")
        assert isinstance(refused.value.body, dict)
        assert refused.value.body["param"] == "previous_response_id"
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="other", input="x")


async def test_the_midstream_fault_cuts_a_responses_stream() -> None:
    async with running_sim(SimConfig(mode="echo")) as url, _client(url) as client:
        events = await client.responses.create(
            model="tiny", input="one two three four five six", stream=True,
            extra_headers={"x-sim-fault": "midstream:4"},
        )  # fmt: skip
        kinds = []
        with pytest.raises(openai.APIError):
            async for event in events:
                kinds.append(event.type)
        assert len(kinds) == 4 and "response.completed" not in kinds
