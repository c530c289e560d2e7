"""How streams end: a client that hangs up is still billed for its prompt and what was relayed
(and its TPM settles with that), and an upstream that falls silent ends the stream."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from sqlalchemy import select

from fleetgate.api.state import GATEWAY
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.tables import spend
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Reply

WORDS = " ".join(f"word{i}" for i in range(60))
PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0}


def _config(up: FakeUpstream, **deployment: Any) -> dict[str, Any]:
    dep = {"provider": "openai", "model": "m", "api_base": up.url, "price": PRICE, **deployment}
    return {"models": [{"alias": "tiny", "deployments": [dep]}]}


async def _hang_up_after(url: str, path: str, body: dict[str, Any], chunks: int) -> None:
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            url + path,
            json=body,
            headers={
                **AUTH,
                "x-api-key": AUTH["Authorization"].split()[1],
                "anthropic-version": "2023-06-01",
            },
        )
        assert resp.status == 200
        seen = 0
        async for _ in resp.content.iter_any():
            seen += 1
            if seen >= chunks:
                break
        resp.close()  # the client goes away mid-stream


async def _spend_rows(client: Any) -> list[Any]:
    tenancy = client.app[GATEWAY].core.ports.require(TENANCY)
    for _ in range(50):
        await tenancy.writer.flush()
        async with tenancy.db.engine.connect() as conn:
            rows = (await conn.execute(select(spend))).all()
        if rows:
            return list(rows)
        await asyncio.sleep(0.1)
    return []


async def test_a_stream_abandoned_before_its_end_is_billed_for_prompt_and_relayed_tokens(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    url = str(client.make_url("")).rstrip("/")
    for path, body in (
        ("/v1/chat/completions", {"model": "tiny", "stream": True,
                                  "messages": [{"role": "user", "content": "tell me " * 50}]}),
        ("/v1/messages", {"model": "tiny", "stream": True, "max_tokens": 200,
                          "messages": [{"role": "user", "content": "tell me " * 50}]}),
    ):  # fmt: skip
        upstream.queue(Reply(content=WORDS, chunk_delay=0.05))
        await _hang_up_after(url, path, body, chunks=5)
    await asyncio.sleep(0.5)  # the gateway notices the disconnect
    rows = await _spend_rows(client)
    assert len(rows) == 2
    for row in rows:
        assert row.status == 499
        assert row.input_tokens > 50  # the prompt, estimated (no usage came)
        assert 0 < row.output_tokens < 60  # what was relayed before the hang-up
        assert row.cost_nusd > 0


async def test_an_upstream_that_falls_silent_ends_the_stream_with_an_error_event(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, timeouts={"idle": 0.3}))
    upstream.queue(Reply(content=WORDS, chunk_delay=3.0))
    body = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    raw = await resp.read()
    assert time.monotonic() - started < 2.5
    assert b'"error"' in raw and b"timed out" in raw


async def test_a_stream_abandoned_after_its_slot_went_early_is_billed_and_frees_nothing_twice(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    """``scheduling.start_before_end``: the stream's slot goes to the next request at its
    last chunk but one (``max_tokens`` 6); its client then hangs up. It is billed as any
    abandoned stream, and the pool's count comes back to 0, not below."""
    config = {**_config(upstream, max_num_seqs=1), "scheduling": {"start_before_end": 1}}
    client = await gateway(config)
    url = str(client.make_url("")).rstrip("/")
    body = {"model": "tiny", "stream": True, "max_tokens": 6,
            "messages": [{"role": "user", "content": "tell me " * 50}]}  # fmt: skip
    upstream.queue(Reply(content=WORDS, chunk_delay=0.05))  # (it ignores max_tokens)
    upstream.queue(Reply(content="short"))
    first = asyncio.create_task(_hang_up_after(url, "/v1/chat/completions", body, chunks=12))
    await asyncio.sleep(0.1)
    second = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    await second.read()  # admitted at the first's last chunk but one, while it still streams
    assert second.status == 200 and not first.done()
    await first
    await asyncio.sleep(0.5)  # the gateway notices the disconnect
    rows = [r for r in await _spend_rows(client) if r.status == 499]
    assert len(rows) == 1 and rows[0].output_tokens >= 5 and rows[0].cost_nusd > 0
    resp = await client.get("/admin/queues", headers=AUTH)
    pools = {p["pool"]: p for p in (await resp.json())["data"]}
    assert pools["tiny"]["admitted"] == 0
