"""Engine state: scraped metrics moved forward by local tracking, scraping real simulators."""

from __future__ import annotations

import socket
from typing import Any

from fleetgate.config.schema import DeploymentConfig, RoutingConfig
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.context import Pick
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_metrics import EngineSnapshot
from fleetgate.routing.engine_stats import EngineStats, engine_key
from fleetgate.sim import SimConfig, running_sim
from tests.resources.support import outbound
from tests.routing.support import route_ctx

__all__ = ["outbound"]


def dep(api_base: str, name: str = "d") -> Deployment:
    provider: Any = None
    return Deployment(name, "chat", DeploymentConfig(model="tiny", api_base=api_base), provider)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_engine_key_strips_v1() -> None:
    assert engine_key(dep("http://10.0.0.1:8000/v1")) == "http://10.0.0.1:8000"
    assert engine_key(dep("http://10.0.0.1:8000")) == "http://10.0.0.1:8000"


def test_view_without_scrape_is_local_tracking(outbound: OutboundHttp) -> None:
    d = dep("http://e1/v1")
    stats = EngineStats(RoutingConfig(), lambda: [d], http=outbound)
    t = stats.dispatched(Pick(d), route_ctx(prompt_tokens=500))
    view = stats.view(d)
    assert (view.queued, view.queued_prefill_tokens, view.running) == (1, 500, 0)
    assert not view.scraped
    stats.first_token(t)
    assert (stats.view(d).queued, stats.view(d).running) == (0, 1)
    stats.finished(t)
    assert stats.view(d).load == 0


def test_scrape_is_moved_forward_by_what_was_sent_since(outbound: OutboundHttp) -> None:
    clock = Clock()
    d = dep("http://e1/v1")
    stats = EngineStats(RoutingConfig(), lambda: [d], clock=clock, http=outbound)
    stats.record(engine_key(d), EngineSnapshot("vllm", waiting=4, running=10, at=clock.now))
    # Between two scrapes we send 3 requests: the router must see them at once.
    ctx = route_ctx(prompt_tokens=100)
    tickets = [stats.dispatched(Pick(d, uncached_tokens=300), ctx) for _ in range(3)]
    view = stats.view(d)
    assert view.scraped
    assert view.queued == 7 and view.running == 10
    # 4 requests of other clients are queued too; their work is estimated, ours is known.
    assert view.queued_prefill_tokens > 900
    for t in tickets:
        stats.first_token(t)
    assert (stats.view(d).queued, stats.view(d).running) == (4, 13)


def test_a_stale_scrape_is_ignored(outbound: OutboundHttp) -> None:
    clock = Clock()
    d = dep("http://e1/v1")
    stats = EngineStats(
        RoutingConfig(scrape_interval_s=0.1), lambda: [d], clock=clock, http=outbound
    )
    stats.record(engine_key(d), EngineSnapshot("vllm", waiting=50, running=50, at=clock.now))
    assert stats.view(d).queued == 50
    clock.now += 5.0
    assert stats.view(d).queued == 0 and not stats.view(d).scraped


async def test_scrapes_simulators_and_backs_off_from_a_dead_engine(
    outbound: OutboundHttp,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    async with running_sim(SimConfig(kv_blocks=128, block_size=32)) as url:
        live, dead = dep(f"{url}/v1", "live"), dep(f"http://127.0.0.1:{dead_port}/v1", "dead")
        stats = EngineStats(
            RoutingConfig(scrape_interval_s=0.05), lambda: [live, dead], http=outbound
        )
        try:
            await stats.scrape_once()
            snap = stats.snapshot(live)
            assert snap is not None and snap.engine == "vllm"
            assert (snap.block_size, snap.num_blocks) == (32, 128)
            assert stats.view(live).scraped
            assert stats.snapshot(dead) is None
            assert not stats.view(dead).scraped
        finally:
            await stats.aclose()
