"""`RedisConnections`: one lean command connection and one redis-py pool per URL."""

from __future__ import annotations

import asyncio
import os

import pytest

from fleetgate.resources import RedisConnections
from tests.tenancy.support import REDIS_URL, free_port


async def test_one_connection_of_each_kind_per_url_and_nothing_opened_before_use() -> None:
    redis = RedisConnections()
    other = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: no I/O may happen yet
    try:
        assert redis.commands(REDIS_URL) is redis.commands(REDIS_URL)
        assert redis.client(REDIS_URL) is redis.client(REDIS_URL)
        assert redis.commands(other) is not redis.commands(REDIS_URL)
        assert redis.client(other) is not redis.client(REDIS_URL)
        assert redis.urls() == sorted({REDIS_URL, other})
        assert redis.commands(other).connects == 0
    finally:
        await redis.aclose()
    assert redis.urls() == []


async def test_the_pool_has_a_connect_timeout_so_a_dead_redis_fails_fast() -> None:
    redis = RedisConnections()
    try:
        kwargs = redis.client(REDIS_URL).connection_pool.connection_kwargs
        assert kwargs["socket_connect_timeout"] == 1.0
    finally:
        await redis.aclose()


@pytest.mark.redis
async def test_commands_and_pubsub_share_the_owner_and_close_with_it() -> None:
    redis = RedisConnections()
    key = f"fgtest:{os.getpid()}:{os.urandom(4).hex()}"
    try:
        resp = redis.commands(REDIS_URL)
        assert await resp.call("SET", key, "1") == b"OK"
        client = redis.client(REDIS_URL)
        async with client.pubsub() as pubsub:
            await pubsub.subscribe(key)
            assert await client.publish(key, "hi") == 1
            message = None
            for _ in range(20):
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
                if message is not None:
                    break
            assert message is not None and message["data"] == b"hi"
        await client.delete(key)
        assert resp.connects == 1
    finally:
        await redis.aclose()
        await redis.aclose()  # idempotent
    # a component still holding the lean client after shutdown reconnects on demand
    assert resp._conn is None


async def test_closing_a_pool_that_never_connected_is_quiet() -> None:
    redis = RedisConnections()
    redis.client(f"redis://127.0.0.1:{free_port()}/0")
    redis.commands(f"redis://127.0.0.1:{free_port()}/0")
    await asyncio.wait_for(redis.aclose(), 2)
