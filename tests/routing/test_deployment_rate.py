"""Per-deployment ``rpm`` / ``tpm``: at its cap a deployment is passed over for the alias's
others, then the fallbacks; when nothing has room, 429 with Retry-After (LiteLLM's spreading)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fleetgate.config.schema import DeploymentConfig
from fleetgate.routing.deployment import DeploymentState
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def _not_at_a_minute_edge() -> None:
    """The window is the clock's minute: start a test well inside one."""
    if time.monotonic() % 60 > 55:
        await asyncio.sleep(61 - time.monotonic() % 60)


def _dep(up: FakeUpstream, **caps: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "m", "api_base": up.url, "name": up.name, **caps}


async def test_a_capped_deployment_spreads_to_the_others_then_429(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    config = {"models": [{"alias": "tiny", "deployments": [
        _dep(upstream, rpm=2), _dep(upstream_b, rpm=1)]}]}  # fmt: skip
    client = await gateway(config)
    await _not_at_a_minute_edge()
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
        assert resp.status == 200, await resp.text()
    assert (len(upstream.seen), len(upstream_b.seen)) == (2, 1)  # each to its own cap
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.status == 429
    assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(resp.headers["Retry-After"]) <= 60
    assert len(upstream.seen) + len(upstream_b.seen) == 3  # nothing sent past a cap


async def test_a_capped_alias_falls_back(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    config = {"models": [
        {"alias": "tiny", "fallbacks": ["spare"], "deployments": [_dep(upstream, rpm=1)]},
        {"alias": "spare", "deployments": [_dep(upstream_b)]},
    ]}  # fmt: skip
    client = await gateway(config)
    await _not_at_a_minute_edge()
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
        assert resp.status == 200
    assert (len(upstream.seen), len(upstream_b.seen)) == (1, 2)


def test_the_window_counts_prompt_tokens_and_resets_each_minute() -> None:
    state = DeploymentState()
    assert state.within_rate(None, 100, 60, now=120.0)
    state.count_rate(60, now=120.0)
    assert not state.within_rate(None, 100, 41, now=150.0)  # 60 + 41 > 100
    assert state.within_rate(None, 100, 40, now=150.0)
    assert state.within_rate(None, 100, 100, now=180.0)  # the next minute: a fresh window
    state.count_rate(1, now=180.0)
    assert not state.within_rate(1, None, 1, now=181.0)


def test_caps_are_positive_when_set() -> None:
    assert DeploymentConfig(model="m", api_base="http://x", rpm=5, tpm=10).rpm == 5
    for bad in ({"rpm": 0}, {"tpm": -1}):
        try:
            DeploymentConfig(model="m", api_base="http://x", **bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")
