import asyncio
import base64

import aiohttp
import numpy as np
import openai
import pytest
from openai import AsyncOpenAI

from fleetgate.sim import SimConfig, running_sim

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Echo this sentence, please!"},
]


def _client(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base_url}/v1", api_key="sk-sim", max_retries=0, timeout=10)


async def test_chat_non_stream_echo_with_usage() -> None:
    async with running_sim(SimConfig(mode="echo")) as url:
        async with _client(url) as client:
            resp = await client.chat.completions.create(model="tiny", messages=MESSAGES)
            assert resp.object == "chat.completion"
            assert resp.choices[0].message.content == "Echo this sentence, please!"
            assert resp.choices[0].finish_reason == "stop"
            assert resp.usage is not None
            assert resp.usage.completion_tokens == 8  # Echo| this| sent|ence|,| plea|se|!
            assert resp.usage.total_tokens == resp.usage.prompt_tokens + 8
            cut = await client.chat.completions.create(
                model="tiny", messages=MESSAGES, max_tokens=2
            )
            assert cut.choices[0].message.content == "Echo this"
            assert cut.choices[0].finish_reason == "length"


async def test_chat_stream_n_choices_and_include_usage() -> None:
    config = SimConfig(mode="random", decode_ms_per_step=1.0, seed=7)
    async with running_sim(config) as url:
        async with _client(url) as client:
            stream = await client.chat.completions.create(
                model="tiny",
                messages=MESSAGES,
                stream=True,
                n=2,
                max_tokens=5,
                stream_options={"include_usage": True},
            )
            texts = {0: "", 1: ""}
            finishes = {}
            chunks = [chunk async for chunk in stream]
            for chunk in chunks[:-1]:
                assert chunk.object == "chat.completion.chunk"
                assert chunk.usage is None and len(chunk.choices) == 1
                choice = chunk.choices[0]
                texts[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
            last = chunks[-1]
            assert last.choices == [] and last.usage is not None
            assert last.usage.completion_tokens == 10
            assert finishes == {0: "length", 1: "length"}
            assert all(len(t.split()) == 5 for t in texts.values())


async def test_raw_sse_framing_and_usage_null_fields() -> None:
    async with running_sim(SimConfig(mode="echo")) as url, aiohttp.ClientSession() as s:
        body = {"model": "tiny", "messages": MESSAGES, "stream": True, "unknown_field": 1}
        body["stream_options"] = {"include_usage": True}
        async with s.post(f"{url}/v1/chat/completions", json=body) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            raw = await resp.read()
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    assert all(e.startswith(b"data: {") for e in events[:-2])
    assert all(b'"usage":null' in e for e in events[:-3])
    assert b'"prompt_tokens_details":{"cached_tokens":' in events[-3]


async def test_completions_stream_and_prefix_cache_shows_in_cached_tokens() -> None:
    prompt = "word " * 100
    config = SimConfig(mode="echo", prefill_ms_per_token=0.01, decode_ms_per_step=0.5)
    async with running_sim(config) as url:
        async with _client(url) as client:
            first = await client.completions.create(model="tiny", prompt=prompt, max_tokens=3)
            assert first.object == "text_completion" and first.choices[0].text == "word word word"
            again = await client.completions.create(model="tiny", prompt=prompt, max_tokens=3)
            assert again.usage is not None and again.usage.prompt_tokens_details is not None
            assert again.usage.prompt_tokens_details.cached_tokens == 96
            salted = await client.completions.create(
                model="tiny", prompt=prompt, max_tokens=3, extra_body={"cache_salt": "team-a"}
            )
            assert salted.usage is not None and salted.usage.prompt_tokens_details is not None
            assert salted.usage.prompt_tokens_details.cached_tokens == 0
            stream = await client.completions.create(
                model="tiny", prompt=prompt, max_tokens=4, stream=True
            )
            text = "".join([c.choices[0].text async for c in stream if c.choices])
            assert text == "word word word word"


async def test_images_count_as_prompt_tokens_and_cost_prefill_time() -> None:
    config = SimConfig(image_tokens=300, prefill_ms_per_token=0.1, decode_ms_per_step=1.0)
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    text = {"type": "text", "text": "what is this"}
    async with running_sim(config) as url:
        async with _client(url) as client:
            loop = asyncio.get_running_loop()
            plain_msg = [{"role": "user", "content": [text]}]
            plain = await client.chat.completions.create(
                model="tiny", messages=plain_msg, max_tokens=1
            )
            start = loop.time()
            five = await client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": [text] + [part] * 5}],
                max_tokens=1,
            )
            elapsed = loop.time() - start
    assert plain.usage is not None and five.usage is not None
    assert five.usage.prompt_tokens == plain.usage.prompt_tokens + 1500
    assert elapsed >= 0.14  # 1500 image tokens x 0.1 ms, only 1 block of 16 could be cached


async def test_embeddings_models_tokenize_health() -> None:
    async with running_sim(SimConfig(embedding_dim=64)) as url:
        async with _client(url) as client:
            models = await client.models.list()
            assert [m.id for m in models.data] == ["tiny"]
            emb = await client.embeddings.create(model="tiny", input=["a cat", "a cat", "dog"])
            vecs = [np.asarray(d.embedding) for d in emb.data]
            assert len(vecs[0]) == 64 and np.allclose(vecs[0], vecs[1])
            assert not np.allclose(vecs[0], vecs[2])
            small = await client.embeddings.create(model="tiny", input="x", dimensions=8)
            assert len(small.data[0].embedding) == 8
        async with aiohttp.ClientSession() as s:
            body = {"model": "tiny", "input": "a cat", "encoding_format": "base64"}
            async with s.post(f"{url}/v1/embeddings", json=body) as resp:
                data = (await resp.json())["data"][0]["embedding"]
            assert np.allclose(np.frombuffer(base64.b64decode(data), "<f4"), vecs[0], atol=1e-6)
            async with s.post(f"{url}/tokenize", json={"prompt": "Hello, world"}) as resp:
                tok = await resp.json()
            assert tok["count"] == 5 and len(tok["tokens"]) == 5  # Hell|o|,| worl|d
            async with s.post(f"{url}/tokenize", json={"messages": MESSAGES}) as resp:
                assert (await resp.json())["count"] > 10
            async with s.get(f"{url}/health") as resp:
                assert resp.status == 200


async def test_bad_requests_get_openai_errors() -> None:
    async with running_sim(SimConfig()) as url:
        async with _client(url) as client:
            with pytest.raises(openai.BadRequestError):
                await client.chat.completions.create(model="tiny", messages=[])
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(model="other", messages=MESSAGES)
            with pytest.raises(openai.BadRequestError) as info:
                await client.chat.completions.create(
                    model="tiny", messages=MESSAGES, max_tokens=10**6
                )
            assert info.value.code == "context_length_exceeded"
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{url}/v1/chat/completions", data=b"{not json") as resp:
                assert resp.status == 400
                err = (await resp.json())["error"]
            assert err["type"] == "invalid_request_error" and "JSON" in err["message"]
            body = {"model": "tiny", "messages": MESSAGES, "n": "two"}
            async with s.post(f"{url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 400
                assert (await resp.json())["error"]["param"] == "n"


async def test_metrics_have_vllm_names() -> None:
    async with running_sim(SimConfig(decode_ms_per_step=0.5)) as url:
        async with _client(url) as client:
            await client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3)
        async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
            text = await resp.text()
    for name in (
        'vllm:num_requests_running{model_name="tiny"} 0',
        'vllm:num_requests_waiting{model_name="tiny"} 0',
        'vllm:kv_cache_usage_perc{model_name="tiny"} 0',
        'vllm:cache_config_info{model_name="tiny",block_size="16",num_gpu_blocks="8192"',
        'vllm:prefix_cache_queries_total{model_name="tiny"}',
        'vllm:prefix_cache_hits_total{model_name="tiny"} 0',
        'vllm:num_preemptions_total{model_name="tiny"} 0',
        'vllm:generation_tokens_total{model_name="tiny"} 3',
        'vllm:request_success_total{model_name="tiny",finished_reason="length"} 1',
        'vllm:time_to_first_token_seconds_count{model_name="tiny"} 1',
        'vllm:inter_token_latency_seconds_count{model_name="tiny"} 2',
        'vllm:time_per_output_token_seconds_count{model_name="tiny"} 1',
        'vllm:e2e_request_latency_seconds_count{model_name="tiny"} 1',
        'vllm:request_queue_time_seconds_count{model_name="tiny"} 1',
        'fleetgate_sim_requests_cancelled_total{model_name="tiny"} 0',
    ):
        assert name in text, name


async def test_priority_needs_the_priority_policy() -> None:
    async with running_sim(SimConfig(mode="echo")) as url:
        async with _client(url) as client:
            with pytest.raises(openai.BadRequestError) as err:
                await client.chat.completions.create(
                    model="tiny", messages=MESSAGES, extra_body={"priority": 1}
                )
            assert "priority" in str(err.value)
            ok = await client.chat.completions.create(
                model="tiny", messages=MESSAGES, extra_body={"priority": 0}
            )
            assert ok.choices[0].message.content
    async with running_sim(SimConfig(mode="echo", scheduling_policy="priority")) as url:
        async with _client(url) as client:
            ok = await client.chat.completions.create(
                model="tiny", messages=MESSAGES, extra_body={"priority": 3}
            )
            assert ok.choices[0].message.content
