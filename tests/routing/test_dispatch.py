"""Retries, cooldown, fallbacks, context-window fallback and local-only aliases, end to end
through the in-process gateway against fake upstreams that fail in each way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from fleetgate.config.schema import GatewayConfig, HealthConfig, RouterConfig, TimeoutConfig
from fleetgate.contract.request import Endpoint
from fleetgate.errors import RateLimited
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.routing.table import RouteTable
from fleetgate.telemetry.metrics import GatewayMetrics
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Garbage, Hang, Reply, Reset, Status
from tests.routing.support import route_ctx

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}]}


def _dep(up: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "api_base": up.url, "name": up.name, **extra}


def _config(*aliases: dict[str, Any], **router: Any) -> dict[str, Any]:
    return {
        "models": list(aliases),
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.005,
                   "timeouts": {"first_token": 0.5, "connect": 0.5, "total": 1.0}, **router},
        "health": {"allowed_fails": 2, "cooldown_s": 60, "probe_interval_s": 0.05},
    }  # fmt: skip


@pytest.mark.parametrize(
    "failure", [Status(500), Status(503), Status(429, retry_after=0), Garbage(), Reset(), Hang(5)]
)
@pytest.mark.parametrize("stream", [False, True])
async def test_failure_is_retried_on_the_healthy_replica(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    upstream_b: FakeUpstream,
    failure: Any,
    stream: bool,
) -> None:
    upstream.queue(*[failure] * 5)
    client = await gateway(
        _config({"alias": "tiny", "strategy": "least-load",
                 "deployments": [_dep(upstream), _dep(upstream_b)]})
    )  # fmt: skip
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream},
                                 headers=AUTH)  # fmt: skip
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-fleetgate-deployment"] == "b"
        await resp.read()


async def test_fallback_alias_when_every_replica_fails(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    upstream.queue(*[Status(500)] * 10)
    client = await gateway(
        _config(
            {"alias": "tiny", "fallbacks": ["smart"], "deployments": [_dep(upstream)]},
            {"alias": "smart", "deployments": [_dep(upstream_b)]},
        )
    )
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 200
    assert resp.headers["x-fleetgate-deployment"] == "b"
    metrics = await (await client.get("/metrics")).text()
    assert 'fleetgate_fallbacks_total{alias="tiny",fallback="smart"} 1' in metrics


@pytest.mark.parametrize(
    ("failure", "status"),
    [(Status(500), 502), (Garbage(), 502), (Reset(), 502), (Hang(5), 504), (Status(429), 429)],
)
async def test_clear_error_when_nothing_healthy_remains(
    gateway: GatewayFactory, upstream: FakeUpstream, failure: Any, status: int
) -> None:
    upstream.queue(*[failure] * 10)
    client = await gateway(_config({"alias": "tiny", "deployments": [_dep(upstream)]}))
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == status
    assert (await resp.json())["error"]["message"]


async def test_unreachable_upstream_is_502_then_503_while_cooling(
    gateway: GatewayFactory,
) -> None:
    dead = {"model": "m", "api_base": "http://127.0.0.1:9/v1", "name": "dead"}
    client = await gateway(_config({"alias": "tiny", "deployments": [dead]}))
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 502
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 503
    ready = await client.get("/health/ready")
    assert ready.status == 503
    assert (await ready.json())["unavailable_aliases"] == ["tiny"]


async def test_cooled_down_replica_returns_after_probe(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    upstream.queue(Status(500), Status(500))
    upstream.healthy = False
    client = await gateway(
        _config({"alias": "tiny", "strategy": "least-load",
                 "deployments": [_dep(upstream), _dep(upstream_b)]}, num_retries=0)
    )  # fmt: skip
    failures = 0
    for _ in range(40):  # least-load ties are random: go on until a has failed twice
        resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
        failures += resp.status == 502
        if failures == 2:
            break
    assert failures == 2  # no retries configured: each failure of a is a 502
    for _ in range(5):  # a is cooling down: only b answers
        resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
        assert resp.headers["x-fleetgate-deployment"] == "b"
    await asyncio.sleep(0.2)  # failing probes keep it out of rotation
    ready = await (await client.get("/health/ready")).json()
    assert ready["aliases"]["tiny"] == {"healthy": 1, "wakeable": 0, "total": 2}
    probes_while_down = upstream.probes
    assert probes_while_down >= 2
    upstream.healthy = True
    for _ in range(40):
        ready = await (await client.get("/health/ready")).json()
        if ready["aliases"]["tiny"]["healthy"] == 2:
            break
        await asyncio.sleep(0.02)
    assert ready["aliases"]["tiny"]["healthy"] == 2
    assert upstream.probes > probes_while_down


async def test_context_window_fallback(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    client = await gateway(
        _config(
            {"alias": "tiny", "fallbacks": ["long"],
             "deployments": [_dep(upstream, context_window=100)]},
            {"alias": "long", "deployments": [_dep(upstream_b, context_window=100_000)]},
        )
    )  # fmt: skip
    short = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert short.headers["x-fleetgate-deployment"] == "a"
    long_chat = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 400}]}
    resp = await client.post("/v1/chat/completions", json=long_chat, headers=AUTH)
    assert resp.status == 200
    assert resp.headers["x-fleetgate-deployment"] == "b"


async def test_context_window_exceeded_everywhere(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(
        _config({"alias": "tiny", "deployments": [_dep(upstream, context_window=50)]})
    )
    long_chat = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 400}]}
    resp = await client.post("/v1/chat/completions", json=long_chat, headers=AUTH)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "context_length_exceeded"
    assert not upstream.seen


async def test_local_only_alias_never_falls_back_to_public(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    upstream.queue(*[Status(500)] * 10)
    client = await gateway(
        _config(
            {"alias": "tiny", "fallbacks": ["public"],
             "deployments": [_dep(upstream, tags=["local"])]},
            {"alias": "public", "deployments": [_dep(upstream_b, tags=["cloud"])]},
        )
    )  # fmt: skip
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 502
    assert not upstream_b.seen


async def test_no_retry_after_first_byte(gateway: GatewayFactory, upstream: FakeUpstream,
                                         upstream_b: FakeUpstream) -> None:  # fmt: skip
    upstream.queue(Reply(content="a b c d e f", fail_after_chunks=2))
    client = await gateway(
        _config({"alias": "tiny", "strategy": "least-load",
                 "deployments": [_dep(upstream)]})
    )  # fmt: skip
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True}, headers=AUTH)
    assert resp.status == 200
    text = (await resp.read()).decode()
    assert '"error"' in text  # reported inside the stream, not retried
    assert len(upstream.seen) == 1


class _Answers:
    """A provider whose streams record how they were closed."""

    def __init__(self) -> None:
        self.calls: list[UpstreamCall] = []
        self.closed: list[bool] = []

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        self.calls.append(call)

        async def close(graceful: bool) -> None:
            self.closed.append(graceful)

        async def more() -> AsyncIterator[list[bytes]]:
            yield [b"data: [DONE]\n\n"]

        return UpstreamResponse(first_batch=[b"data: {}\n\n"], batches=more(), closer=close)

    async def probe(self) -> bool:
        return True


class _Salted:
    name = "salted"

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        return Pick(candidates[0], {"cache_salt": "s1"}, uncached_tokens=7)


class _Observer:
    def __init__(self) -> None:
        self.log: list[str] = []

    def dispatched(self, pick: Pick, ctx: RouteContext) -> object:
        self.log.append(f"dispatched:{pick.deployment.id}:{pick.uncached_tokens}")
        return "ticket"

    def first_token(self, ticket: object) -> None:
        self.log.append(f"first_token:{ticket}")

    def finished(self, ticket: object) -> None:
        self.log.append(f"finished:{ticket}")


def _table(provider: _Answers) -> RouteTable:
    registry = StrategyRegistry()
    registry.register("salted", lambda _: _Salted())
    config = GatewayConfig.model_validate(
        {"models": [{"alias": "a", "strategy": "salted",
                     "deployments": [{"model": "m", "api_base": "http://x", "name": "d"}]}]}
    )  # fmt: skip
    return RouteTable.build(config, lambda _: provider, registry, {})


def _dispatcher(table: RouteTable, observer: _Observer) -> Dispatcher:
    metrics = GatewayMetrics()
    health = HealthTracker(HealthConfig(), metrics, table.deployments)
    return Dispatcher(RouterConfig(), health, metrics, observer=observer)


def _build(pick: Pick) -> UpstreamCall:
    body = {"model": pick.deployment.config.model, **(pick.extra_body or {})}
    return UpstreamCall(Endpoint.CHAT, body, True, TimeoutConfig())


async def test_the_pick_reaches_the_call_and_the_block_gives_everything_back() -> None:
    provider, observer = _Answers(), _Observer()
    table = _table(provider)
    dispatcher = _dispatcher(table, observer)
    [dep] = table.deployments()
    async with dispatcher.dispatch(table, route_ctx("a").request, _build) as sent:
        assert dep.state.in_flight == 1
        assert provider.calls[0].body == {"model": "m", "cache_salt": "s1"}
        sent.upstream_done = True
    assert dep.state.in_flight == 0
    assert provider.closed == [True]  # the stream ended: the connection may be kept
    assert observer.log == ["dispatched:d:7", "first_token:ticket", "finished:ticket"]


async def test_a_failure_inside_the_block_still_gives_everything_back() -> None:
    provider, observer = _Answers(), _Observer()
    table = _table(provider)
    dispatcher = _dispatcher(table, observer)
    [dep] = table.deployments()
    with pytest.raises(ZeroDivisionError):
        async with dispatcher.dispatch(table, route_ctx("a").request, _build):
            _ = 1 / 0
    assert dep.state.in_flight == 0
    assert provider.closed == [False]  # cut short: the upstream request is aborted
    assert observer.log[-1] == "finished:ticket"


async def test_an_upstream_context_length_error_falls_back_like_an_oversized_prompt(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    vllm_says = (
        "This model's maximum context length is 2048 tokens. However, you requested 2700 "
        "tokens (2600 in the messages, 100 in the completion)."
    )
    for _ in range(3):
        upstream.queue(Status(400, message=vllm_says))  # one per request: never tried twice
    client = await gateway({
        "models": [
            {"alias": "tiny", "deployments": [_dep(upstream)], "fallbacks": ["big"]},
            {"alias": "big", "deployments": [_dep(upstream_b)]},
        ],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "tenancy": {"enabled": False},
    })  # fmt: skip
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-fleetgate-deployment"] == "b"
    ready = await (await client.get("/health/ready")).json()
    assert ready["aliases"]["tiny"]["healthy"] == 1  # never cooled down for it


async def test_a_plain_upstream_400_is_still_the_callers_error(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    upstream.queue(Status(400, message="temperature must be at most 2"))
    client = await gateway({
        "models": [
            {"alias": "tiny", "deployments": [_dep(upstream)], "fallbacks": ["big"]},
            {"alias": "big", "deployments": [_dep(upstream_b)]},
        ],
        "tenancy": {"enabled": False},
    })  # fmt: skip
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 400
    assert not upstream_b.seen


async def test_a_gate_refused_before_the_send_sends_nothing_upstream() -> None:
    """A reservation refused while the request waited (in the admission queue, in a retry's
    backoff, before a fallback) must not reach the engine: the refusal is raised at once."""
    provider, observer = _Answers(), _Observer()
    table = _table(provider)
    dispatcher = _dispatcher(table, observer)
    [dep] = table.deployments()
    req = route_ctx("a").request
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    gate.set_exception(RateLimited("over", retry_after=1))
    req.gate = gate
    with pytest.raises(RateLimited):
        async with dispatcher.dispatch(table, req, _build):
            pass
    assert provider.calls == []  # the engine never saw it
    assert dep.state.in_flight == 0
