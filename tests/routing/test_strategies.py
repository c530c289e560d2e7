from __future__ import annotations

import random
from collections import Counter

import pytest

from fleetgate.config.schema import AliasConfig, DeploymentConfig, Price
from fleetgate.errors import ConfigError
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.strategies import (
    CostStrategy,
    LatencyStrategy,
    LeastLoadStrategy,
    StrategyRegistry,
    WeightedStrategy,
)
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream
from tests.resources.support import outbound
from tests.routing.support import route_ctx

__all__ = ["outbound"]


class _NoProvider:
    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        raise AssertionError("not called")

    async def probe(self) -> bool:
        return True


def _deps(*configs: dict[str, object]) -> list[Deployment]:
    out = []
    for i, extra in enumerate(configs):
        cfg = DeploymentConfig.model_validate({"model": "m", "api_base": "http://x", **extra})
        out.append(Deployment(f"d{i}", "a", cfg, _NoProvider()))
    return out


CTX = route_ctx("a")


def test_weighted_follows_weights() -> None:
    deps = _deps({"weight": 3}, {"weight": 1}, {"weight": 0})
    s = WeightedStrategy(random.Random(1))
    counts = Counter(s.pick(deps, CTX).deployment.id for _ in range(4000))
    assert counts["d2"] == 0
    assert 2.5 < counts["d0"] / counts["d1"] < 3.5


def test_least_load_picks_fewest_in_flight() -> None:
    deps = _deps({}, {}, {})
    deps[0].state.in_flight, deps[1].state.in_flight, deps[2].state.in_flight = 5, 1, 3
    assert LeastLoadStrategy().pick(deps, CTX).deployment.id == "d1"


def test_latency_prefers_low_ewma_and_explores_unmeasured() -> None:
    deps = _deps({}, {})
    for _ in range(5):
        deps[0].state.observe_ttft(0.5)
    s = LatencyStrategy()
    assert s.pick(deps, CTX).deployment.id == "d1"  # never measured: try it
    deps[1].state.observe_ttft(0.1)
    assert s.pick(deps, CTX).deployment.id == "d1"
    deps[1].state.observe_ttft(2.0)
    deps[1].state.observe_ttft(2.0)
    assert s.pick(deps, CTX).deployment.id == "d0"


def test_cost_picks_cheapest_then_least_loaded() -> None:
    cheap = {"price": Price(input_per_mtok=0.1, output_per_mtok=0.2)}
    deps = _deps({"price": Price(input_per_mtok=1, output_per_mtok=2)}, cheap, cheap)
    deps[1].state.in_flight = 4
    assert CostStrategy().pick(deps, CTX).deployment.id == "d2"


def test_registry_refuses_unknown_names(outbound: OutboundHttp) -> None:
    reg = StrategyRegistry.with_builtins(EngineAwareRouting.standalone(outbound))
    alias = AliasConfig.model_validate(
        {
            "alias": "a",
            "strategy": "psychic",
            "deployments": [{"model": "m", "api_base": "http://x"}],
        }
    )
    with pytest.raises(ConfigError, match="unknown strategy 'psychic'"):
        reg.create(alias)
    reg.register("psychic", lambda _: LeastLoadStrategy())
    assert reg.create(alias).name == "least-load"


async def test_latency_learns_from_json_responses_too(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    """JSON-only traffic: the slow deployment's answers teach the strategy to avoid it."""
    slow = {"provider": "openai", "model": "m", "api_base": upstream.url, "name": "slow"}
    fast = {"provider": "openai", "model": "m", "api_base": upstream_b.url, "name": "fast"}
    client = await gateway({
        "models": [{"alias": "tiny", "strategy": "latency", "deployments": [slow, fast]}],
        "tenancy": {"enabled": False},
    })  # fmt: skip
    upstream.delay_s = 0.2
    served = []
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(12):
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200
        served.append(resp.headers["x-fleetgate-deployment"])
    assert served[-8:].count("fast") >= 7, served
