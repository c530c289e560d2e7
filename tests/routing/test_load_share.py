"""Two gateway replicas see each other's in-flight requests through a real Redis."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from fleetgate.config.schema import DeploymentConfig, RoutingConfig
from fleetgate.resources import OutboundHttp, RedisConnections
from fleetgate.routing.context import Pick
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_stats import EngineStats
from fleetgate.routing.load_share import RedisLoadShare
from tests.resources.support import outbound
from tests.routing.support import route_ctx

__all__ = ["outbound"]

pytestmark = pytest.mark.redis


def _dep() -> Deployment:
    provider: Any = None
    config = DeploymentConfig(model="tiny", api_base="http://engine-1:8000/v1")
    return Deployment("e1", "chat", config, provider)


async def test_replicas_route_on_each_others_load(redis_url: str, outbound: OutboundHttp) -> None:
    d = _dep()
    config = RoutingConfig()
    redis_a, redis_b = RedisConnections(), RedisConnections()  # one owner per replica
    # A TTL far above a stall of the loaded CI box: with the 2 s default, b once read no row
    # of a's (most likely expired during a stall between the two syncs); a prefix of its own.
    prefix = f"test:load:{uuid.uuid4().hex}"

    def share(redis: RedisConnections, replica: str) -> RedisLoadShare:
        return RedisLoadShare(redis.client(redis_url), replica, prefix=prefix, ttl_s=60.0)

    a = EngineStats(config, lambda: [], share=share(redis_a, "a"), http=outbound)
    b = EngineStats(config, lambda: [], share=share(redis_b, "b"), http=outbound)
    try:
        ctx = route_ctx(prompt_tokens=400)
        tickets = [a.dispatched(Pick(d), ctx) for _ in range(3)]
        await a.sync_share()
        await b.sync_share()
        seen = b.view(d)
        assert seen.queued == 3 and seen.queued_prefill_tokens == 1200
        assert a.view(d).queued == 3  # a does not count itself twice
        for t in tickets:
            a.finished(t)
        await a.sync_share()
        await b.sync_share()
        assert b.view(d).load == 0
    finally:
        await a.aclose()
        await b.aclose()
        await redis_a.client(redis_url).delete(f"{prefix}:replicas")
        await redis_a.aclose()
        await redis_b.aclose()
