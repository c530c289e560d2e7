"""KV events from a simulated vLLM over ZMQ into the gateway's per-engine index."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from fleetgate.config.schema import KvEventsConfig
from fleetgate.routing.kv_events import EventBlockIndex
from fleetgate.routing.kv_subscriber import KvEventSubscribers
from fleetgate.sim import SimConfig
from fleetgate.sim.app import SIM_KV_EVENTS
from fleetgate.sim.kv_events import KvEventPublisher
from fleetgate.sim.runner import start_sim
from fleetgate.sim.state import SIM_STATE
from fleetgate.telemetry.registry import Registry
from tests.procs import free_port


@asynccontextmanager
async def events_sim(*, replay: bool = True, kv_blocks: int = 256) -> AsyncIterator[Any]:
    # ``*`` ports: the publisher binds free ports itself (a port picked here first can be taken
    # by a parallel test's server before the bind)
    cfg = SimConfig(
        model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.2, output_len=2,
        kv_blocks=kv_blocks, block_size=16,
        kv_events_endpoint="tcp://127.0.0.1:*",
        kv_events_replay_endpoint="tcp://127.0.0.1:*" if replay else None,
    )  # fmt: skip
    runner, url = await start_sim(cfg)
    try:
        publisher = runner.app[SIM_KV_EVENTS]
        yield (
            runner.app,
            url,
            KvEventsConfig(endpoint=publisher.endpoint, replay_endpoint=publisher.replay_endpoint),
        )
    finally:
        await runner.cleanup()


async def _complete(http: aiohttp.ClientSession, url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "m", "prompt": prompt, "max_tokens": 2}
    async with http.post(f"{url}/v1/completions", json=body) as resp:
        assert resp.status == 200
        return dict(await resp.json())


async def _tokens(http: aiohttp.ClientSession, url: str, prompt: str) -> list[int]:
    async with http.post(f"{url}/tokenize", json={"model": "m", "prompt": prompt}) as resp:
        return list((await resp.json())["tokens"])


async def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.01)


def _doc(n: int, words: int = 150) -> str:
    return " ".join(f"doc{n}word{i}" for i in range(words))


async def test_the_index_matches_what_the_engine_reports_as_cached() -> None:
    index = EventBlockIndex()
    subs = KvEventSubscribers(index)
    async with events_sim() as (app, url, cfg), aiohttp.ClientSession() as http:
        subs.sync({url: cfg})
        await asyncio.sleep(0.2)  # ZMQ's slow joiner: the replay from 0 covers it anyway
        prompt = _doc(1)
        ids = await _tokens(http, url, prompt)
        await _complete(http, url, prompt)
        await _until(lambda: index.match(url, ids, None) > 0)
        assert index.trusted(url)  # read from sequence 0
        predicted = min(index.match(url, ids, None), (len(ids) - 1) // 16 * 16)
        again = await _complete(http, url, prompt)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == predicted > 0
        # A cache reset arrives as AllBlocksCleared.
        async with http.post(f"{url}/reset_prefix_cache") as resp:
            assert resp.status == 200
        await _until(lambda: index.size(url) == 0)
        assert index.trusted(url)
    await subs.aclose()


async def test_evictions_keep_the_index_equal_to_the_engines_cache() -> None:
    index = EventBlockIndex()
    subs = KvEventSubscribers(index)
    async with events_sim(kv_blocks=40) as (app, url, cfg), aiohttp.ClientSession() as http:
        subs.sync({url: cfg})
        kv = app[SIM_STATE].engine.kv
        for n in range(12):  # ~10 blocks each into 40: most are evicted again
            await _complete(http, url, _doc(n))
        await _until(lambda: index.size(url) == kv.num_cached)
        assert kv.evictions > 0
        for n in range(12):
            ids = await _tokens(http, url, _doc(n))
            hashes = kv.block_hashes(ids)
            engine_blocks = len(kv.find_cached(hashes, len(ids) + 16))
            assert index.match(url, ids, None) == engine_blocks * 16, n
    await subs.aclose()


async def test_a_lost_batch_is_replayed() -> None:
    index = EventBlockIndex()
    registry = Registry()
    subs = KvEventSubscribers(index, registry)
    async with events_sim() as (app, url, cfg), aiohttp.ClientSession() as http:
        subs.sync({url: cfg})
        await _complete(http, url, _doc(1))
        await _until(lambda: index.size(url) > 0)
        publisher: KvEventPublisher = app[SIM_KV_EVENTS]
        publisher.drop_next = 1
        ids2 = await _tokens(http, url, _doc(2))
        await _complete(http, url, _doc(2))  # its batch is lost...
        await _complete(http, url, _doc(3))  # ...and noticed when this one arrives
        ids3 = await _tokens(http, url, _doc(3))
        await _until(lambda: index.match(url, ids3, None) > 0)
        assert index.match(url, ids2, None) > 0  # filled in by the replay
        assert index.trusted(url)
        line = f'fleetgate_kv_events_gaps_total{{engine="{url}",filled="yes"}} 1'
        assert line in registry.render().decode()
    await subs.aclose()


async def test_a_gap_without_replay_falls_back_until_resync() -> None:
    index = EventBlockIndex(resync_s=60.0)
    subs = KvEventSubscribers(index)
    async with events_sim(replay=False) as (app, url, cfg), aiohttp.ClientSession() as http:
        subs.sync({url: cfg})
        await asyncio.sleep(0.3)  # joined before the first batch: sequence 0 is heard
        await _complete(http, url, _doc(1))
        await _until(lambda: index.size(url) > 0)
        assert index.trusted(url)
        app[SIM_KV_EVENTS].drop_next = 1
        await _complete(http, url, _doc(2))
        await _complete(http, url, _doc(3))
        ids3 = await _tokens(http, url, _doc(3))
        await _until(lambda: index.match(url, ids3, None) > 0)
        assert not index.trusted(url)  # routing uses the gateway's own index meanwhile
    await subs.aclose()


async def test_an_engine_restart_starts_the_index_over() -> None:
    index = EventBlockIndex()
    subs = KvEventSubscribers(index)
    key = "http://engine"
    doc = list(range(64))
    publisher = KvEventPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    await publisher.start()
    assert publisher.replay_endpoint is not None
    cfg = KvEventsConfig(endpoint=publisher.endpoint, replay_endpoint=publisher.replay_endpoint)
    try:
        subs.sync({key: cfg})
        await _until(lambda: index.trusted(key))  # an empty replay buffer: an empty cache
        publisher.stored(11, None, doc[:16], None)
        publisher.stored(12, 11, doc[16:32], None)
        await _until(lambda: index.match(key, doc, None) == 32)
        await publisher.aclose()
        # The engine comes back (same endpoints): a new stream from sequence 0.
        publisher = KvEventPublisher(cfg.endpoint, cfg.replay_endpoint)
        await publisher.start()
        await asyncio.sleep(0.3)  # the subscriber reconnects
        publisher.stored(21, None, doc[:16], None)
        await _until(lambda: index.match(key, doc, None) == 16)
        assert index.trusted(key) and index.size(key) == 1
    finally:
        await subs.aclose()
        await publisher.aclose()


async def test_an_engine_that_starts_after_the_gateway_is_followed_from_its_start() -> None:
    pub, rep = free_port(), free_port()
    cfg = KvEventsConfig(
        endpoint=f"tcp://127.0.0.1:{pub}", replay_endpoint=f"tcp://127.0.0.1:{rep}"
    )
    index = EventBlockIndex()
    subs = KvEventSubscribers(index, replay_timeout_s=0.3)
    key = "http://late-engine"
    subs.sync({key: cfg})
    await asyncio.sleep(0.6)  # the start-up replay found nobody: not trusted, not stuck
    assert not index.trusted(key)
    publisher = KvEventPublisher(cfg.endpoint, cfg.replay_endpoint)
    await publisher.start()
    try:
        await asyncio.sleep(0.3)
        publisher.stored(1, None, list(range(16)), None)
        await _until(lambda: index.size(key) == 1)
        assert index.trusted(key)  # its stream began at sequence 0
    finally:
        await subs.aclose()
        await publisher.aclose()


async def test_an_endpoint_that_cannot_be_connected_to_leaks_nothing_and_closes() -> None:
    # "tcp://*:port" is a bind address: connect refuses it. Each retry's socket was left open,
    # and closing the subscribers then waited for them for ever (the event loop with it).
    index = EventBlockIndex()
    subs = KvEventSubscribers(index, replay_timeout_s=0.2)
    port = free_port()
    subs.sync({"http://bad": KvEventsConfig(endpoint=f"tcp://*:{port}")})
    await asyncio.sleep(0.1)
    assert not index.trusted("http://bad")
    await asyncio.wait_for(subs.aclose(), 5)
