"""The kv-aware strategy: expected TTFT in seconds, prefix hits, load, hot spots, tenants."""

from __future__ import annotations

import random
from typing import Any

import pytest

from fleetgate.config.schema import DeploymentConfig, KvAwareConfig, RoutingConfig
from fleetgate.contract.principal import Principal
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.engine_metrics import EngineSnapshot
from fleetgate.routing.engine_stats import EngineStats, EngineView, engine_key
from fleetgate.routing.kv_aware import KvAwareStrategy, expected_ttft
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.tokens import estimate_prompt_tokens
from tests.resources.support import outbound
from tests.routing.support import route_ctx

__all__ = ["outbound"]

SYSTEM = "You are the billing assistant of a large telecom company. " * 60
TEAM_A = Principal("key-a", team_id="team-a")
TEAM_B = Principal("key-b", team_id="team-b")


def deps(n: int) -> list[Deployment]:
    provider: Any = None
    return [
        Deployment(f"e{i}", "chat", DeploymentConfig(model="m", api_base=f"http://e{i}/v1"),
                   provider)
        for i in range(n)
    ]  # fmt: skip


def routing(http: OutboundHttp, **overrides: Any) -> EngineAwareRouting:
    config = RoutingConfig(**overrides)
    stats = EngineStats(config, lambda: (), http=http)
    shared = EngineAwareRouting(config, stats, secret=b"s3cret", rng=random.Random(1), http=http)
    return shared


def ctx(question: str, principal: Principal = TEAM_A, **headers: str) -> RouteContext:
    body = {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": question}]}  # fmt: skip
    return route_ctx(
        "chat", principal=principal, prompt_tokens=estimate_prompt_tokens(body), body=body,
        headers=headers, max_tokens=50,
    )  # fmt: skip


def test_cost_is_seconds_of_queue_prefill_and_decode_interference() -> None:
    kv = KvAwareConfig(prefill_ms_per_token=1.0, decode_ms_per_step=20.0,
                       decode_batch_factor=0.0, max_num_batched_tokens=1000)  # fmt: skip
    idle = EngineView("vllm", queued=0, queued_prefill_tokens=0, running=0, kv_usage=0)
    assert expected_ttft(kv, idle, 500) == (0.0, 0.5, 0.0)
    busy = EngineView("vllm", queued=2, queued_prefill_tokens=1500, running=10, kv_usage=0.5)
    queue_s, prefill_s, inter_s = expected_ttft(kv, busy, 500)
    assert queue_s == pytest.approx(1.5 + 2 * 0.02)  # 1500 tokens in 2 chunks of 990
    assert prefill_s == pytest.approx(0.5)
    assert inter_s == pytest.approx(0.02)


def test_follow_ups_of_a_shared_prefix_go_where_it_is_cached(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(4)
    first = strategy.pick(candidates, ctx("How do I read my bill?")).deployment
    stats = shared.stats
    for i in range(5):
        c = ctx(f"Question number {i} about roaming charges?")
        picked = strategy.pick(candidates, c)
        assert picked.deployment is first
        uncached = picked.uncached_tokens
        assert uncached is not None and uncached < c.request.prompt_tokens / 5
        stats.finished(stats.dispatched(picked, c))
    found = shared.decisions.query(alias="chat", reason="prefix-hit")
    assert len(found) == 5
    assert found[0].candidates[0].cost_s >= 0
    ratio = shared.decisions.hit_ratio("chat")
    assert ratio is not None and ratio > 0.6


def test_a_long_queue_outweighs_a_cached_prefix(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(2)
    home = strategy.pick(candidates, ctx("first")).deployment
    # The replica holding the prefix has 40 requests of 2000 uncached tokens queued.
    shared.stats.record(engine_key(home), EngineSnapshot("vllm", waiting=0, running=0, at=1e18))
    for _ in range(40):
        shared.stats.dispatched(Pick(home), route_ctx(prompt_tokens=2000))
    c = ctx("second")
    picked = strategy.pick(candidates, c)
    assert picked.deployment is not home
    assert shared.decisions.query(limit=1)[0].reason in ("load", "hotspot-guard")


def test_hotspot_guard_excludes_a_replica_far_above_the_rest(outbound: OutboundHttp) -> None:
    shared = routing(outbound,
                     kv_aware=KvAwareConfig(prefill_ms_per_token=0.001, decode_ms_per_step=0.0,
                                            hotspot_slack=4, hotspot_ratio=2.0))  # fmt: skip
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(2)
    home = strategy.pick(candidates, ctx("first")).deployment
    for _ in range(10):  # cheap work, but many requests: the guard, not the cost, moves it
        t = shared.stats.dispatched(Pick(home), route_ctx(prompt_tokens=1))
        shared.stats.first_token(t)
    c = ctx("second")
    assert strategy.pick(candidates, c).deployment is not home
    decision = shared.decisions.query(limit=1)[0]
    assert decision.reason == "hotspot-guard"
    assert [x.excluded for x in decision.candidates if x.deployment == home.id] == ["hotspot"]


def test_without_shared_prefixes_it_balances_load(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(3)
    counts = {d.id: 0 for d in candidates}
    for i in range(30):
        body = {"messages": [{"role": "user", "content": f"{i} " + "unique words " * 50}]}
        c = route_ctx("chat", principal=TEAM_A, prompt_tokens=estimate_prompt_tokens(body),
                      body=body)  # fmt: skip
        picked = strategy.pick(candidates, c)
        counts[picked.deployment.id] += 1
        shared.stats.dispatched(picked, c)  # never finishes: load accumulates
    assert sorted(counts.values()) == [10, 10, 10]


def test_session_affinity_counts_the_previous_turn_as_cached(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(3)
    img = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
    body = {"messages": [img]}  # no text at all: no prefix to index, only the session
    first = route_ctx("chat", principal=TEAM_A, prompt_tokens=800, body=body,
                      headers={"x-session-id": "conv-1"})  # fmt: skip
    home = strategy.pick(candidates, first).deployment
    follow = route_ctx("chat", principal=TEAM_A, prompt_tokens=900, body=body,
                       headers={"x-session-id": "conv-1"})  # fmt: skip
    assert strategy.pick(candidates, follow).deployment is home
    assert shared.decisions.query(limit=1)[0].reason == "affinity"
    # Another tenant using the same conversation id is not steered by it.
    other = route_ctx("chat", principal=TEAM_B, prompt_tokens=900, body=body,
                      headers={"x-session-id": "conv-1"})  # fmt: skip
    strategy.pick(candidates, other)
    assert shared.decisions.query(limit=1)[0].reason != "affinity"


def _salted(shared: Any, strategy: KvAwareStrategy, candidates: Any, c: Any) -> Any:
    """The pick as the dispatcher sends it: with the tenant's cache_salt (routing/salt.py)."""
    return shared.tenant_salt.apply(strategy.pick(candidates, c), c)


def test_tenants_do_not_share_prefixes_and_get_their_own_salt(outbound: OutboundHttp) -> None:
    shared = routing(outbound, cache_salt="always")
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(4)
    a = _salted(shared, strategy, candidates, ctx("hello", TEAM_A))
    b = _salted(shared, strategy, candidates, ctx("hello again", TEAM_B))
    assert shared.decisions.query(limit=1)[0].cached_tokens == 0  # A's prefix is not B's
    assert a.extra_body is not None and b.extra_body is not None
    assert a.extra_body["cache_salt"] != b.extra_body["cache_salt"]
    a2 = _salted(shared, strategy, candidates, ctx("more", TEAM_A))
    assert a2.extra_body is not None
    assert a2.extra_body["cache_salt"] == a.extra_body["cache_salt"]
    assert shared.decisions.query(limit=1)[0].cached_tokens > 0


def test_public_prefixes_are_shared_and_unsalted(outbound: OutboundHttp) -> None:
    shared = routing(outbound, cache_salt="always", public_prefixes=(SYSTEM[:40],))
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(4)
    strategy.pick(candidates, ctx("hello", TEAM_A))
    b = _salted(shared, strategy, candidates, ctx("hello again", TEAM_B))
    assert b.extra_body is None
    assert shared.decisions.query(limit=1)[0].reason == "prefix-hit"


def test_salt_only_goes_to_vllm_engines_in_auto_mode(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    [only] = deps(1)
    picked = _salted(shared, strategy, [only], ctx("hi"))
    assert picked.extra_body is None  # engine unknown: a hosted API would refuse it
    shared.stats.record(engine_key(only), EngineSnapshot("vllm", at=1e18))
    picked = _salted(shared, strategy, [only], ctx("hi"))
    assert picked.extra_body == {"cache_salt": shared.salt("team-a")}
    assert shared.decisions.query(limit=1)[0].reason == "only-candidate"


def test_registry_knows_kv_aware_and_round_robin(outbound: OutboundHttp) -> None:
    registry = StrategyRegistry.with_builtins(EngineAwareRouting.standalone(outbound))
    assert {"kv-aware", "round-robin"} <= set(registry.names())


def test_affinity_does_not_pin_a_session_whose_prompt_changed(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    candidates = deps(3)
    counts = {d.id: 0 for d in candidates}
    for i in range(30):  # one session, but every request starts with a new system prompt
        body = {"messages": [{"role": "system", "content": f"Request {i}. " + "fresh words " * 60},
                             {"role": "user", "content": "same question"}]}  # fmt: skip
        c = route_ctx("chat", principal=TEAM_A, prompt_tokens=estimate_prompt_tokens(body),
                      body=body, headers={"x-session-id": "conv-9"})  # fmt: skip
        picked = strategy.pick(candidates, c)
        counts[picked.deployment.id] += 1
        shared.stats.dispatched(picked, c)  # never finishes: load accumulates
    assert sorted(counts.values()) == [10, 10, 10]


def test_a_full_kv_cache_counts_against_an_engine(outbound: OutboundHttp) -> None:
    shared = routing(outbound)
    strategy = KvAwareStrategy(shared, "chat")
    full, free = deps(2)
    shared.stats.record(engine_key(full), EngineSnapshot("vllm", at=1e18, kv_usage=0.99))
    shared.stats.record(engine_key(free), EngineSnapshot("vllm", at=1e18, kv_usage=0.2))
    for _ in range(5):
        assert strategy.pick([full, free], ctx("hello there")).deployment is free
    decision = shared.decisions.query(limit=1)[0]
    costs = {c.deployment: c.queue_s for c in decision.candidates}
    assert costs[full.id] > costs[free.id] + 1.0


async def test_tokenization_is_asked_of_the_least_loaded_engine_not_always_the_first(
    outbound: OutboundHttp,
) -> None:
    shared = routing(outbound, kv_aware=KvAwareConfig(exact_tokenize=True))
    asked: list[str] = []

    async def tokenize(dep: Deployment, body: Any) -> list[int]:
        asked.append(dep.id)
        return [1, 2, 3]

    shared.tokenize = tokenize  # type: ignore[method-assign]
    engines = deps(3)
    engines[0].state.in_flight = 4  # the first engine is busy
    strategy = KvAwareStrategy(shared, "chat")
    for i in range(12):
        await strategy.prepare(engines, ctx(f"question {i}"))
    assert "e0" not in asked and {"e1", "e2"} == set(asked)  # spread over the idle ones
