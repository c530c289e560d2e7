"""Images through the gateway: SSRF refusals, bombs, cache hits, image tokens, cap, affinity."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from typing import Any

import pytest
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.procs import metric_value

from fleetgate.contract.dispatch import admitted, preferred
from fleetgate.errors import RateLimited
from fleetgate.multimodal.image_dispatch import ImageDispatchHook
from fleetgate.multimodal.images.budget import ImageComputeBudget


def _config(
    up: FakeUpstream, *more: FakeUpstream, allow_loopback: bool, **images: Any
) -> dict[str, Any]:
    cfg = one_alias(up, *more)
    fetch: dict[str, Any] = {"allow_http": True}
    if allow_loopback:
        fetch["allow_cidrs"] = ["127.0.0.0/8"]
    cfg["multimodal"] = {"images": {"fetch": fetch, **images}}
    cfg["tenancy"] = {"enabled": False}
    return cfg


def _chat(url: str, n: int = 1) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "What is in these pictures?"}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for _ in range(n)]
    return {"model": "tiny", "messages": [{"role": "user", "content": parts}]}


def _png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.mark.parametrize("path", ["/img.png", "/to-private"])
async def test_loopback_and_redirects_to_private_addresses_are_400(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    image_server: tuple[str, list[str]],
    path: str,
) -> None:
    base, _hits = image_server
    # /img.png: 127.0.0.1 itself is refused by default. /to-private: 127.0.0.1 is allowed,
    # but the redirect to 10.0.0.7 is not.
    client = await gateway(_config(upstream, allow_loopback=path != "/img.png"))
    resp = await client.post("/v1/chat/completions", json=_chat(base + path), headers=AUTH)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["type"] == "invalid_request_error"
    assert "non-public address" in err["message"]
    assert err["param"] == "messages[0].content[1].image_url"
    assert upstream.seen == []


async def test_private_address_literal_is_400_without_connecting(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, allow_loopback=True))
    for url in ("http://10.1.2.3/cat.png", "https://[::1]/x.png", "http://169.254.169.254/x"):
        resp = await client.post("/v1/chat/completions", json=_chat(url), headers=AUTH)
        assert resp.status == 400, url
    assert upstream.seen == []


async def test_decompression_bomb_is_refused(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, allow_loopback=False))
    bomb = base64.b64encode(_png_header_only(100_000, 100_000)).decode()
    resp = await client.post(
        "/v1/chat/completions", json=_chat(f"data:image/png;base64,{bomb}"), headers=AUTH
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "image_too_large"


async def test_repeated_image_is_a_cache_hit_without_second_decode(
    gateway: GatewayFactory, upstream: FakeUpstream, image_server: tuple[str, list[str]]
) -> None:
    base, _ = image_server
    client = await gateway(_config(upstream, allow_loopback=True))
    for _ in range(2):
        resp = await client.post(
            "/v1/chat/completions", json=_chat(base + "/img.png"), headers=AUTH
        )
        assert resp.status == 200, await resp.text()
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "fleetgate_image_decodes_total") == 1
    assert metric_value(metrics, "fleetgate_image_cache_hits_total", tier="memory") == 1
    assert metric_value(metrics, "fleetgate_image_cache_misses_total") == 1
    sent = [s.body["messages"][0]["content"][1]["image_url"]["url"] for s in upstream.seen]
    assert len(sent) == 2 and sent[0] == sent[1] and sent[0].startswith("data:image/png;base64,")


async def test_image_tokens_count_against_the_context_window(
    gateway: GatewayFactory, upstream: FakeUpstream, image_server: tuple[str, list[str]]
) -> None:
    base, _ = image_server
    cfg = _config(upstream, allow_loopback=True, token_family="llava")  # 576 tokens per image
    cfg["models"][0]["deployments"][0]["context_window"] = 700
    client = await gateway(cfg)
    one = await client.post("/v1/chat/completions", json=_chat(base + "/img.png"), headers=AUTH)
    assert one.status == 200
    two = await client.post("/v1/chat/completions", json=_chat(base + "/img.png", 2), headers=AUTH)
    assert two.status == 400
    assert (await two.json())["error"]["code"] == "context_length_exceeded"


async def test_per_request_image_cap(
    gateway: GatewayFactory, upstream: FakeUpstream, image_server: tuple[str, list[str]]
) -> None:
    base, hits = image_server
    client = await gateway(
        _config(upstream, allow_loopback=True, budget={"max_images_per_request": 2})
    )
    resp = await client.post("/v1/chat/completions", json=_chat(base + "/img.png", 3), headers=AUTH)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "too_many_images"
    assert hits == []  # refused before fetching anything


async def test_repeated_image_goes_to_the_replica_that_encoded_it(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    upstream_b: FakeUpstream,
    image_server: tuple[str, list[str]],
) -> None:
    base, _ = image_server
    client = await gateway(_config(upstream, upstream_b, allow_loopback=True))
    chosen = set()
    for _ in range(8):
        resp = await client.post(
            "/v1/chat/completions", json=_chat(base + "/img.png"), headers=AUTH
        )
        assert resp.status == 200
        chosen.add(resp.headers["x-fleetgate-deployment"])
    assert len(chosen) == 1
    # Text-only requests are still spread by the strategy.
    for _ in range(16):
        resp = await client.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
            headers=AUTH,
        )
        chosen.add(resp.headers["x-fleetgate-deployment"])
    assert len(chosen) == 2


class _Dep:
    """Just what the hook reads of a deployment."""

    class _State:
        in_flight = 0

    def __init__(self, dep_id: str) -> None:
        self.id = dep_id
        self.state = self._State()


async def test_budget_admits_image_requests_in_turn_per_deployment() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=1000)
    a, b = _Dep("a"), _Dep("b")
    first = ImageDispatchHook(["k1"], 800, affinity=None, budget=budget)
    second = ImageDispatchHook(["k2"], 800, affinity=None, budget=budget)
    other = ImageDispatchHook(["k3"], 800, affinity=None, budget=budget)
    order: list[str] = []
    release = asyncio.Event()

    async def run(name: str, hook: ImageDispatchHook, dep: Any, hold: bool) -> None:
        async with admitted([hook], dep):
            order.append(name)
            if hold:
                await release.wait()

    t1 = asyncio.create_task(run("first", first, a, True))
    await asyncio.sleep(0.01)
    t2 = asyncio.create_task(run("second", second, a, False))
    t3 = asyncio.create_task(run("other-deployment", other, b, False))
    await asyncio.sleep(0.05)
    assert order == ["first", "other-deployment"]  # "second" waits for a's budget
    assert budget.waiting("a") == 1
    release.set()
    await asyncio.gather(t1, t2, t3)
    assert order == ["first", "other-deployment", "second"]
    assert budget.in_flight("a") == 0


async def test_budget_queue_timeout_is_a_429() -> None:
    budget = ImageComputeBudget(default_tokens_in_flight=100)
    dep = _Dep("a")
    holder = ImageDispatchHook([], 100, affinity=None, budget=budget)
    waiter = ImageDispatchHook([], 100, affinity=None, budget=budget, queue_timeout_s=0.05)
    async with admitted([holder], dep):
        with pytest.raises(RateLimited):
            async with admitted([waiter], dep):
                pass
    assert budget.waiting("a") == 0 and budget.in_flight("a") == 0
    assert preferred([holder], [dep]) == [dep]  # type: ignore[list-item]
