"""A fallback into another alias passes that alias's limits and the key's alias allowlist, as
a direct call to it would, with the in-process limiter and with Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Status

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}


@pytest.fixture(params=["memory", "redis"])
def limiter_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Gateway settings for each limiter: in process, or a private redis-server."""
    if request.param == "memory":
        return {}
    url: str = request.getfixturevalue("redis_url")
    return {"redis_url": url}


@pytest.fixture
async def spare_up() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream("spare") as up:
        yield up


def _config(primary: FakeUpstream, spare: FakeUpstream, **spare_limits: int) -> dict[str, Any]:
    def dep(up: FakeUpstream) -> dict[str, Any]:
        return {"provider": "openai", "model": "m", "api_base": up.url, "name": up.name}

    return {
        "models": [
            {"alias": "primary", "fallbacks": ["spare"], "deployments": [dep(primary)]},
            {"alias": "spare", "deployments": [dep(spare)]},
        ],
        "router": {"num_retries": 0, "retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "health": {"allowed_fails": 100},  # the failing primary stays in the pool
        "tenancy": {"alias_limits": {"spare": spare_limits}},
    }


async def _key(client: TestClient[Any, Any], **fields: Any) -> dict[str, str]:
    team = await (await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)).json()
    body = {"team": team["id"], **fields}
    key = await (await client.post("/admin/keys", json=body, headers=AUTH)).json()
    return {"Authorization": f"Bearer {key['key']}"}


async def _chat(
    client: TestClient[Any, Any], key: dict[str, str], alias: str, stream: bool = False
) -> tuple[int, Any]:
    body = {"model": alias, **CHAT, "stream": stream}
    resp = await client.post("/v1/chat/completions", json=body, headers=key)
    return resp.status, (await resp.text() if stream else await resp.json())


async def test_a_fallback_into_an_exhausted_alias_is_refused_like_a_direct_call(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    spare_up: FakeUpstream,
    limiter_settings: dict[str, Any],
) -> None:
    client = await gateway(_config(upstream, spare_up, rpm=1), **limiter_settings)
    key = await _key(client)
    assert (await _chat(client, key, "spare"))[0] == 200
    status, body = await _chat(client, key, "spare")
    assert status == 429, body  # the alias's minute is used up
    upstream.queue(Status(500, message="primary is down"))
    status, body = await _chat(client, key, "primary")
    # not served by the exhausted alias: the client gets the primary's own failure
    assert status >= 500 and body["error"]["type"] != "rate_limit_error", body
    assert len(spare_up.seen) == 1


async def test_fallbacks_count_in_the_aliases_limits_and_free_their_slots(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    spare_up: FakeUpstream,
    limiter_settings: dict[str, Any],
) -> None:
    client = await gateway(_config(upstream, spare_up, rpm=2, max_parallel=1), **limiter_settings)
    key = await _key(client)
    for stream in (True, False):  # one at a time: each frees the parallel slot when it ends
        upstream.queue(Status(500))
        status, body = await _chat(client, key, "primary", stream)
        assert status == 200, body
    assert len(spare_up.seen) == 2
    status, body = await _chat(client, key, "spare")
    assert status == 429, body  # the two fallbacks used the alias's two requests this minute
    assert len(spare_up.seen) == 2


async def test_a_key_not_allowed_the_fallback_alias_is_not_served_by_it(
    gateway: GatewayFactory, upstream: FakeUpstream, spare_up: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, spare_up))
    key = await _key(client, aliases=["primary"])
    assert (await _chat(client, key, "spare"))[0] == 404
    upstream.queue(Status(500))
    status, body = await _chat(client, key, "primary")
    assert status >= 500, body
    assert spare_up.seen == []
