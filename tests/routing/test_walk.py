"""The route walk the relay and ``fleetgate epp`` share: `Dispatcher.choose` picks as
`Dispatcher.dispatch` does (same deployment, same body fields, same refusals), without
sending."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from fleetgate.config.schema import GatewayConfig, HealthConfig, RouterConfig, TimeoutConfig
from fleetgate.contract.request import Endpoint
from fleetgate.errors import ContextWindowExceeded, NoHealthyDeployment, RateLimited
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.health import HealthTracker
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.routing.table import RouteTable
from fleetgate.telemetry.metrics import GatewayMetrics
from tests.routing.support import route_ctx


class _Provider:
    """Answers every call with an empty stream; records the calls."""

    def __init__(self) -> None:
        self.calls: list[UpstreamCall] = []

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        self.calls.append(call)

        async def close(graceful: bool) -> None:
            pass

        async def more() -> AsyncIterator[list[bytes]]:
            yield [b"data: [DONE]\n\n"]

        return UpstreamResponse(first_batch=[b"data: {}\n\n"], batches=more(), closer=close)

    async def probe(self) -> bool:
        return True


class _Emptiest:
    """Picks the deployment with the fewest requests so far (ties: the first), salted."""

    name = "emptiest"

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        dep = min(candidates, key=lambda d: d.state.requests)
        return Pick(dep, {"cache_salt": f"salt-{dep.id}"}, uncached_tokens=3)


def _dep(name: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "api_base": f"http://10.0.0.{len(name)}:8000", "name": name, **extra}


def _router(*aliases: dict[str, Any]) -> tuple[Dispatcher, RouteTable, _Provider, GatewayMetrics]:
    provider = _Provider()
    registry = StrategyRegistry()
    registry.register("emptiest", lambda _: _Emptiest())
    config = GatewayConfig.model_validate(
        {"models": [{"strategy": "emptiest", **a} for a in aliases]}
    )
    table = RouteTable.build(config, lambda _: provider, registry, {})
    metrics = GatewayMetrics()
    health = HealthTracker(HealthConfig(allowed_fails=1, cooldown_s=60), metrics, table.deployments)
    return Dispatcher(RouterConfig(), health, metrics), table, provider, metrics


def _build(pick: Pick) -> UpstreamCall:
    body = {"model": pick.deployment.config.model, **(pick.extra_body or {})}
    return UpstreamCall(Endpoint.CHAT, body, True, TimeoutConfig())


async def test_choose_picks_what_the_relay_sends_to() -> None:
    deps = [_dep("a"), _dep("bb"), _dep("ccc")]
    dispatcher, table, provider, _ = _router({"alias": "chat", "deployments": deps})
    for _ in range(3):  # the relay's pick moves on as requests are counted; choose follows
        chosen = await dispatcher.choose(table, route_ctx("chat").request)
        async with dispatcher.dispatch(table, route_ctx("chat").request, _build) as sent:
            assert sent.deployment is chosen.picks[0].deployment
        assert chosen.picks[0].extra_body == {"cache_salt": f"salt-{sent.deployment.id}"}
        assert provider.calls[-1].body["cache_salt"] == f"salt-{sent.deployment.id}"
    assert [c.body["cache_salt"] for c in provider.calls] == [
        "salt-a",
        "salt-bb",
        "salt-ccc",
    ]


async def test_retry_list_is_distinct_and_serves_the_first_picks_model() -> None:
    deps = [_dep("a"), _dep("bb"), _dep("ccc", model="other"), _dep("dddd")]
    dispatcher, table, _, _ = _router({"alias": "chat", "deployments": deps})
    chosen = await dispatcher.choose(table, route_ctx("chat").request, count=4)
    assert [p.deployment.id for p in chosen.picks] == ["a", "bb", "dddd"]
    one_engine = await dispatcher.choose(
        table, route_ctx("chat").request, count=4, distinct=lambda d: d.config.model
    )
    assert [p.deployment.id for p in one_engine.picks] == ["a"]


async def test_only_narrows_and_an_empty_subset_is_no_healthy_deployment() -> None:
    dispatcher, table, _, _ = _router({"alias": "chat", "deployments": [_dep("a"), _dep("bb")]})
    chosen = await dispatcher.choose(
        table, route_ctx("chat").request, only=lambda d: d.id == "bb", count=2
    )
    assert [p.deployment.id for p in chosen.picks] == ["bb"]
    with pytest.raises(NoHealthyDeployment):
        await dispatcher.choose(table, route_ctx("chat").request, only=lambda d: False)


async def test_a_cooling_alias_falls_back_as_the_relay_does() -> None:
    dispatcher, table, _, metrics = _router(
        {"alias": "chat", "fallbacks": ["big"], "deployments": [_dep("a")]},
        {"alias": "big", "deployments": [_dep("bb")]},
    )
    dep = table.chain("chat")[0].deployments[0]
    dep.state.cooldown_until = float("inf")
    chosen = await dispatcher.choose(table, route_ctx("chat").request)
    assert chosen.route.name == "big"
    assert [p.deployment.id for p in chosen.picks] == ["bb"]
    assert metrics.fallbacks.labels("chat", "big").value == 1


async def test_a_prompt_too_long_everywhere_is_refused_as_by_the_relay() -> None:
    dispatcher, table, _, _ = _router(
        {"alias": "chat", "deployments": [_dep("a", context_window=100)]}
    )
    long = route_ctx("chat", prompt_tokens=90, max_tokens=50).request
    with pytest.raises(ContextWindowExceeded):
        await dispatcher.choose(table, long)
    with pytest.raises(ContextWindowExceeded):
        async with dispatcher.dispatch(table, long, _build):
            pass


async def test_a_deployment_at_its_rpm_is_refused_as_by_the_relay() -> None:
    dispatcher, table, _, _ = _router({"alias": "chat", "deployments": [_dep("a", rpm=1)]})
    async with dispatcher.dispatch(table, route_ctx("chat").request, _build):
        pass  # the minute's one request
    with pytest.raises(RateLimited):
        await dispatcher.choose(table, route_ctx("chat").request)


async def test_a_capped_deployment_is_never_on_the_retry_list() -> None:
    """A data plane retries on ``picks[1:]`` without asking again, so a capped deployment there
    would serve outside its window: only the first pick is taken into one, and capped
    deployments are left off the rest."""
    deps = [_dep("a"), _dep("bb", rpm=1), _dep("ccc"), _dep("dddd", tpm=10_000)]
    dispatcher, table, _, _ = _router({"alias": "chat", "deployments": deps})
    chosen = await dispatcher.choose(table, route_ctx("chat").request, count=4)
    assert [p.deployment.id for p in chosen.picks] == ["a", "ccc"]
    chosen.rate.settle()
    for dep in table.chain("chat")[0].deployments:
        dep.state.requests = 0 if dep.id == "bb" else 10  # the strategy picks bb first now
    capped_first = await dispatcher.choose(table, route_ctx("chat").request, count=4)
    assert [p.deployment.id for p in capped_first.picks] == ["bb", "a", "ccc"]
    capped_first.rate.settle()
