"""Per-deployment ``rpm`` / ``tpm``: at its cap a deployment is passed over for the alias's
others, then the fallbacks; when nothing has room, 429 with Retry-After (LiteLLM's spreading).
``tpm`` counts the answer's tokens too. Across replicas: `test_deployment_rate_fleet`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fleetgate.config.schema import DeploymentConfig
from fleetgate.errors import RateLimited
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.deployment_rate import DeploymentRates, RateHold
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Reply
from tests.routing.support import route_ctx
from tests.routing.test_walk import _dep as _walk_dep
from tests.routing.test_walk import _router

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _dep(up: FakeUpstream, **caps: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "m", "api_base": up.url, "name": up.name, **caps}


async def test_a_capped_deployment_spreads_to_the_others_then_429(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    config = {"models": [{"alias": "tiny", "deployments": [
        _dep(upstream, rpm=2), _dep(upstream_b, rpm=1)]}]}  # fmt: skip
    client = await gateway(config)
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
        assert resp.status == 200, await resp.text()
    assert (len(upstream.seen), len(upstream_b.seen)) == (2, 1)  # each to its own cap
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.status == 429
    assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
    # Retry-After: when the sliding window frees room (about a minute after the first)
    assert 50 <= int(resp.headers["Retry-After"]) <= 60
    # now marked full in this process: refused without asking the limiter, same Retry-After
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.status == 429 and 50 <= int(resp.headers["Retry-After"]) <= 60
    assert len(upstream.seen) + len(upstream_b.seen) == 3  # nothing sent past a cap


async def test_a_capped_alias_falls_back(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    config = {"models": [
        {"alias": "tiny", "fallbacks": ["spare"], "deployments": [_dep(upstream, rpm=1)]},
        {"alias": "spare", "deployments": [_dep(upstream_b)]},
    ]}  # fmt: skip
    client = await gateway(config)
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
        assert resp.status == 200
    assert (len(upstream.seen), len(upstream_b.seen)) == (1, 2)


async def test_tpm_counts_the_answer_s_tokens_too(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    """Settled after the answer with prompt + completion, as a key's tpm is: one long answer
    fills the window, so the next request goes to the other deployment."""
    config = {"models": [{"alias": "tiny", "strategy": "round-robin", "deployments": [
        _dep(upstream, tpm=200), _dep(upstream_b)]}]}  # fmt: skip
    client = await gateway(config)
    long_answer = {"prompt_tokens": 8, "completion_tokens": 190, "total_tokens": 198}
    upstream.queue(Reply(usage=long_answer))
    body = {**BODY, "max_tokens": None}
    first = await _deployment_of(client, body)
    if first != upstream.name:  # round-robin started on b: once more to reach a
        upstream.script.clear()
        upstream.queue(Reply(usage=long_answer))
        first = await _deployment_of(client, body)
    assert first == upstream.name
    # a's window holds 198 of 200 tokens now: no prompt fits, whatever round-robin says
    for _ in range(3):
        assert await _deployment_of(client, body) == upstream_b.name


async def _deployment_of(client: Any, body: dict[str, Any]) -> str:
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200, await resp.text()
    return str(resp.headers["x-fleetgate-deployment"])


async def test_a_refusal_marks_the_deployment_full_until_its_window_frees_room() -> None:
    """The limiter decides; its refusal is remembered (no round trip per request while the
    window is full), for requests or, after a tokens refusal, for prompts as large."""
    config = DeploymentConfig(model="m", api_base="http://x", rpm=2, tpm=1000, name="a")
    dep = Deployment("a", "tiny", config, provider=None)  # type: ignore[arg-type]
    rates = DeploymentRates(MemoryLimiter())
    req = _Req(prompt_tokens=10, max_tokens=5)
    holds = [await rates.take(dep, req) for _ in range(2)]
    assert all(isinstance(h, RateHold) for h in holds)
    refused = await rates.take(dep, req)
    assert isinstance(refused, RateLimited) and 50 <= refused.retry_after <= 60
    assert refused.headers["Retry-After"] in {str(n) for n in range(50, 61)}
    assert not dep.within_rate(1)  # requests: every prompt waits
    assert dep.within_rate(1, now=time.monotonic() + 61)  # the window moved on

    dep.state.rate_full_until = 0.0
    rates = DeploymentRates(MemoryLimiter())
    big = _Req(prompt_tokens=900, max_tokens=200)
    refused = await rates.take(dep, big)
    assert isinstance(refused, RateLimited) and "tokens" in refused.message
    assert dep.within_rate(899) and not dep.within_rate(900)  # smaller prompts still try


class _Outcome:
    prompt_tokens = 0
    completion_tokens = 0


class _Req:
    """What the rates read of a request."""

    def __init__(self, prompt_tokens: int, max_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.body: dict[str, Any] = {}
        self.outcome = _Outcome()


def test_caps_are_positive_when_set() -> None:
    assert DeploymentConfig(model="m", api_base="http://x", rpm=5, tpm=10).rpm == 5
    for bad in ({"rpm": 0}, {"tpm": -1}):
        try:
            DeploymentConfig(model="m", api_base="http://x", **bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")


async def test_choose_takes_its_pick_into_the_window_as_the_relay_does() -> None:
    """``fleetgate epp``'s picks (`Dispatcher.choose`) count in the same windows: the second
    goes to the other deployment, the third is refused with the time the window frees room."""
    dispatcher, table, _, _ = _router(
        {"alias": "chat", "deployments": [_walk_dep("a", rpm=1), _walk_dep("bb", rpm=1)]}
    )
    chosen = [await dispatcher.choose(table, route_ctx("chat").request) for _ in range(2)]
    assert sorted(c.picks[0].deployment.id for c in chosen) == ["a", "bb"]
    assert all(isinstance(c.rate, RateHold) for c in chosen)
    with pytest.raises(RateLimited) as refused:
        await dispatcher.choose(table, route_ctx("chat").request)
    assert 50 <= refused.value.retry_after <= 60
    for c in chosen:
        c.rate.settle()  # the answer's tokens; the requests stay counted for the minute
    with pytest.raises(RateLimited):
        await dispatcher.choose(table, route_ctx("chat").request)
