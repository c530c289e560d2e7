"""The exact response cache through a real gateway: per tenant, marked, counted, billed at the
cached price, streamed like a fresh answer, never filled with what the output check blocked,
and shared by two gateway instances through Redis."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetgate.cache.exact import MemoryExactStore
from tests.cache.support import (
    ask,
    ask_stream,
    cache_config,
    cache_gateway,
    chat,
    spend_by_deployment,
    streamed_text,
    team_key,
)
from tests.conftest import MASTER
from tests.fakes import FakeUpstream, Reply

REDIS_URL = "redis://127.0.0.1:6379/0"
EXACT = {"exact": True, "ttl_s": 60}


async def test_tenant_b_never_gets_tenant_a_s_answer(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply("Answer for team A."), Reply("Answer for team B."))
    async with cache_gateway(cache_config(upstream, EXACT), tmp_path) as client:
        key_a, key_b = await team_key(client, "a"), await team_key(client, "b")
        body = chat("What is our refund policy?", temperature=0)
        assert (await ask(client, key_a, body))[:2] == (200, "miss")
        status, header, data = await ask(client, key_a, body)
        assert (status, header) == (200, "hit-exact")
        assert data["choices"][0]["message"]["content"] == "Answer for team A."
        assert len(upstream.seen) == 1  # the hit never reached the upstream
        status, header, data = await ask(client, key_b, body)
        assert (status, header) == (200, "miss")
        assert data["choices"][0]["message"]["content"] == "Answer for team B."
        assert (await ask(client, key_b, body))[2]["choices"][0]["message"]["content"] == (
            "Answer for team B."
        )
        assert len(upstream.seen) == 2


async def test_only_deterministic_requests_without_tools_are_cached(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    async with cache_gateway(cache_config(upstream, EXACT), tmp_path) as client:
        for body in (
            chat("hello"),  # temperature defaults to 1: the answer may differ each time
            chat("hello", temperature=0.7),
            chat("hello", temperature=0, tools=[{"type": "function",
                                                 "function": {"name": "send_email"}}]),
            chat("hello", temperature=0, n=2),
        ):  # fmt: skip
            for _ in range(2):
                assert (await ask(client, MASTER, body))[:2] == (200, "bypass")
        assert len(upstream.seen) == 8
        # a seed makes it deterministic; stream options and user do not change the key
        assert (await ask(client, MASTER, chat("hi", seed=7, user="u1")))[1] == "miss"
        assert (await ask(client, MASTER, chat("hi", seed=7, user="u2")))[1] == "hit-exact"
        assert (await ask(client, MASTER, chat("hi", seed=8)))[1] == "miss"


async def test_hit_streams_like_a_fresh_answer_and_a_stream_fills_the_cache(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice over."
    upstream.queue(Reply(text), Reply("second question answer"))
    async with cache_gateway(cache_config(upstream, EXACT), tmp_path) as client:
        body = chat("Tell me about foxes", temperature=0)
        assert (await ask(client, MASTER, body))[1] == "miss"
        header, chunks, done = await ask_stream(
            client, MASTER, {**body, "stream_options": {"include_usage": True}}
        )
        assert header == "hit-exact" and done
        assert streamed_text(chunks) == text
        assert len([c for c in chunks if c.get("choices")]) > 3  # in pieces, like a stream
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
        assert finishes[-1] == "stop"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 10
        # a streamed miss is filed too, and answers the non-streaming request
        other = chat("Another question", temperature=0)
        header, chunks, done = await ask_stream(client, MASTER, other)
        assert header == "miss" and streamed_text(chunks) == "second question answer"
        status, header, data = await ask(client, MASTER, other)
        assert header == "hit-exact"
        assert data["choices"][0]["message"]["content"] == "second question answer"
        assert len(upstream.seen) == 2


async def test_hits_are_counted_in_metrics_and_billed_at_the_cached_price(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    config = cache_config(upstream, {**EXACT, "price": {"output_per_mtok": 1.0}})
    upstream.queue(Reply("one two three four"))
    async with cache_gateway(config, tmp_path) as client:
        key = await team_key(client, "billing")
        body = chat("price me", temperature=0)
        for _ in range(3):
            await ask(client, key, body)
        metrics = await (await client.get("/metrics")).text()
        assert 'fleetgate_cache_requests_total{alias="tiny",result="miss"} 1' in metrics
        assert 'fleetgate_cache_requests_total{alias="tiny",result="hit-exact"} 2' in metrics
        assert 'fleetgate_cache_stored_total{alias="tiny",kind="exact"} 1' in metrics
        rows = await spend_by_deployment(client, 3)
        fresh = next(r for d, r in rows.items() if not d.startswith("cache:"))
        # fresh: 10 prompt tokens at $1/M + 4 completion tokens at $2/M
        assert fresh["spend_usd"] == pytest.approx((10 * 1.0 + 4 * 2.0) / 1e6)
        hits = rows["cache:exact"]
        # hits: at the cache's price, only output at $1/M here (the default is free)
        assert hits["requests"] == 2
        assert hits["spend_usd"] == pytest.approx(2 * 4 * 1.0 / 1e6)


async def test_what_the_output_check_blocked_is_never_cached(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    safety = {
        "checks": {"words": {"type": "words"}},
        "policies": {"default": {"output": ["words"], "stream": ["words"]}},
        "audit": {"enabled": False},
    }
    harmful = "Then you pack the pipe bomb with nails."
    upstream.queue(Reply(harmful), Reply(harmful), Reply("A safe answer."))
    async with cache_gateway(cache_config(upstream, EXACT, safety=safety), tmp_path) as client:
        body = chat("how?", temperature=0)
        status, header, data = await ask(client, MASTER, body)
        assert data["choices"][0]["finish_reason"] == "content_filter"
        header, chunks, _ = await ask_stream(client, MASTER, body)
        assert header == "miss"  # the blocked non-stream answer was not filed
        assert "pipe bomb" not in streamed_text(chunks)
        status, header, data = await ask(client, MASTER, body)
        assert header == "miss"  # nor the blocked stream
        assert data["choices"][0]["message"]["content"] == "A safe answer."
        assert (await ask(client, MASTER, body))[1] == "hit-exact"
        assert len(upstream.seen) == 3


async def test_redis_backed_cache_is_shared_by_two_gateways(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    prefix = f"fgtest{os.urandom(4).hex()}:"
    config = cache_config(upstream, EXACT, tenancy={"redis_prefix": prefix})
    upstream.queue(Reply("Shared through Redis."))
    async with (
        cache_gateway(config, tmp_path / "one", redis_url=REDIS_URL) as one,
        cache_gateway(config, tmp_path / "two", redis_url=REDIS_URL) as two,
    ):
        body = chat("shared?", temperature=0)
        assert (await ask(one, MASTER, body))[1] == "miss"
        for _ in range(50):  # the write is queued after the response
            status, header, data = await ask(two, MASTER, body)
            if header == "hit-exact":
                break
        assert header == "hit-exact"
        assert data["choices"][0]["message"]["content"] == "Shared through Redis."
        assert len(upstream.seen) == 1


async def test_memory_store_is_a_bounded_lru_with_ttl() -> None:
    now = [0.0]
    store = MemoryExactStore(max_entries=2, clock=lambda: now[0])
    await store.put("a", b"1", ttl_s=10)
    await store.put("b", b"2", ttl_s=10)
    assert await store.get("a") == b"1"  # a is now the most recently used
    await store.put("c", b"3", ttl_s=10)
    assert await store.get("b") is None and len(store) == 2
    now[0] = 11.0
    assert await store.get("a") is None and await store.get("c") is None


async def test_anthropic_front_door_gets_a_hit_in_its_own_format(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply("Bonjour from the cache."))
    async with cache_gateway(cache_config(upstream, EXACT), tmp_path) as client:
        body = {"model": "tiny", "max_tokens": 64, "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello in French"}]}  # fmt: skip
        headers = {"x-api-key": MASTER, "anthropic-version": "2023-06-01"}
        first = await client.post("/v1/messages", json=body, headers=headers)
        assert first.status == 200 and first.headers["x-fleetgate-cache"] == "miss"
        second = await client.post("/v1/messages", json=body, headers=headers)
        assert second.headers["x-fleetgate-cache"] == "hit-exact"
        data = await second.json()
        assert data["type"] == "message" and data["content"][0]["text"] == "Bonjour from the cache."
        resp = await client.post("/v1/messages", json={**body, "stream": True}, headers=headers)
        assert resp.headers["x-fleetgate-cache"] == "hit-exact"
        raw = (await resp.read()).decode()
        assert "event: message_start" in raw and "event: message_stop" in raw
        assert "Bonjour" in raw
        assert len(upstream.seen) == 1


async def test_the_openai_sdk_streams_a_hit_like_a_fresh_answer(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    from openai import AsyncOpenAI

    text = "Streams from the cache read the same as fresh ones."
    upstream.queue(Reply(text))
    async with cache_gateway(cache_config(upstream, EXACT), tmp_path) as client:
        sdk = AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=MASTER, max_retries=0)
        try:
            results = []
            for _ in range(2):
                raw = await sdk.chat.completions.with_raw_response.create(
                    model="tiny", temperature=0, stream=True,
                    stream_options={"include_usage": True},
                    messages=[{"role": "user", "content": "stream me"}],
                )  # fmt: skip
                pieces, usage = [], None
                async for chunk in raw.parse():
                    pieces.extend(c.delta.content or "" for c in chunk.choices)
                    usage = chunk.usage or usage
                results.append((raw.headers["x-fleetgate-cache"], "".join(pieces), usage))
        finally:
            await sdk.close()
        (miss, fresh, fresh_usage), (hit, cached, cached_usage) = results
        assert (miss, hit) == ("miss", "hit-exact")
        assert fresh == cached == text
        assert fresh_usage is not None and cached_usage is not None
        assert cached_usage.completion_tokens == fresh_usage.completion_tokens
        assert len(upstream.seen) == 1
