"""The decision log: sampled history, queries, metrics."""

from __future__ import annotations

import random

from fleetgate.routing.decisions import CandidateCost, Decision, DecisionLog
from fleetgate.telemetry.registry import Registry


def decision(alias: str, picked: str, reason: str, at: float, cached: int = 0) -> Decision:
    cost = CandidateCost(picked, 0.5, 0.1, 0.3, 0.1, cached, 2.0)
    return Decision(at, alias, "kv-aware", picked, reason, 1000, cached, "team", None, (cost,))


def test_query_filters_newest_first() -> None:
    log = DecisionLog(size=10)
    log.record(decision("chat", "e1", "load", 1.0))
    log.record(decision("chat", "e2", "prefix-hit", 2.0, cached=800))
    log.record(decision("code", "e1", "prefix-hit", 3.0, cached=500))
    assert [d.at for d in log.query()] == [3.0, 2.0, 1.0]
    assert [d.picked for d in log.query(alias="chat")] == ["e2", "e1"]
    assert [d.alias for d in log.query(reason="prefix-hit", deployment="e1")] == ["code"]
    assert [d.at for d in log.query(since=2.0)] == [3.0, 2.0]
    assert len(log.query(limit=1)) == 1
    assert log.query()[0].to_dict()["candidates"][0]["cost_s"] == 0.5


def test_bounded_and_sampled_but_every_decision_counted() -> None:
    registry = Registry()
    log = DecisionLog(registry, size=5, sample_rate=0.5, rng=random.Random(3))
    for i in range(100):
        log.record(decision("chat", "e1", "prefix-hit", float(i), cached=250))
    assert len(log) == 5
    text = registry.render().decode()
    counted = (
        'fleetgate_routing_decisions_total{alias="chat",strategy="kv-aware",reason="prefix-hit"}'
    )
    assert f"{counted} 100" in text
    assert 'fleetgate_routing_prefix_hit_ratio{alias="chat"} 0.25' in text
    assert log.hit_ratio("chat") == 0.25
    assert log.hit_ratio("other") is None


def test_zero_sample_rate_keeps_nothing() -> None:
    log = DecisionLog(sample_rate=0.0)
    log.record(decision("chat", "e1", "load", 1.0))
    assert log.query() == []
