"""Health routes: `/health` as the engines answer it, readiness by rule and per alias."""

from __future__ import annotations

import asyncio
from typing import Any

from fleetgate.config.schema import HealthConfig
from fleetgate.routing.health import HealthTracker
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

CHAT = {"model": "dead", "messages": [{"role": "user", "content": "hi"}]}


def _config(up: FakeUpstream, **health: Any) -> dict[str, Any]:
    dead = {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1", "name": "d"}
    live = {"provider": "openai", "model": "m", "api_base": up.url, "name": "l"}
    return {
        "models": [
            {"alias": "dead", "deployments": [dead]},
            {"alias": "live", "deployments": [live]},
        ],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01, "num_retries": 0},
        "health": health,
        "tenancy": {"enabled": False},
    }


async def _kill_dead_alias(client: Any) -> None:
    for _ in range(3):  # allowed_fails: 3 -> cooled down
        await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)


async def test_health_answers_like_the_engines_for_load_testers(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    resp = await client.get("/health")
    assert resp.status == 200


async def test_one_dead_alias_does_not_make_the_gateway_unready_by_default(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, allowed_fails=1))
    await _kill_dead_alias(client)
    resp = await client.get("/health/ready")
    body = await resp.json()
    assert resp.status == 200
    assert body["unavailable_aliases"] == ["dead"] and body["status"] == "degraded"
    one = await client.get("/health/ready", params={"alias": "dead"})
    assert one.status == 503
    assert (await client.get("/health/ready", params={"alias": "live"})).status == 200
    unknown = await client.get("/health/ready", params={"alias": "nope"})
    assert unknown.status == 404


async def test_ready_rule_all_and_counted_aliases(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    strict = await gateway(_config(upstream, allowed_fails=1, ready_rule="all"))
    await _kill_dead_alias(strict)
    assert (await strict.get("/health/ready")).status == 503
    only_live = await gateway(
        _config(upstream, allowed_fails=1, ready_rule="all", ready_aliases=["live"])
    )
    await _kill_dead_alias(only_live)
    assert (await only_live.get("/health/ready")).status == 200


async def test_a_probe_slower_than_probe_timeout_counts_as_failed() -> None:
    class Slow:
        async def probe(self) -> bool:
            await asyncio.sleep(5)
            return True

    class Dep:
        provider = Slow()

    tracker = HealthTracker.__new__(HealthTracker)
    tracker.config = HealthConfig(probe_timeout_s=0.05)
    started = asyncio.get_running_loop().time()
    assert await tracker._probe(Dep()) is False  # type: ignore[arg-type]
    assert asyncio.get_running_loop().time() - started < 1.0
