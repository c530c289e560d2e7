"""The reservation overlapping the upstream call (`tenancy.overlap_reserve`), against a real
Redis behind a proxy that holds its replies, a real gateway and the simulator: the upstream
call leaves before the reservation is answered, nothing reaches the client before the grant,
a refusal that comes after the send aborts the call and answers 429 with one audit row and no
spend, a cancelled request's late grant is settled, and an outage fails closed."""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from fleetgate.sim import SimConfig, running_sim
from fleetgate.tenancy.tables import request_audit, spend
from tests.procs import metric_value
from tests.tenancy.support import Gateway, gateway_via_redis_proxy, wait_for

pytestmark = pytest.mark.redis


async def _sim(upstream: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(upstream + "/sim/stats") as resp:
        stats: dict[str, Any] = await resp.json()
        return stats


def _patient(gw: Gateway) -> None:
    """Give the limiter's Redis connection time to wait for held replies (0.25 s by default:
    a held reply would otherwise count as Redis gone). Call after the first request."""
    redis = gw.tenancy.limiter.redis  # type: ignore[attr-defined]
    redis.timeout_s = 10.0
    conn = redis._conn
    assert conn is not None
    conn.timeout_s = 10.0
    # Replies still on their way (the first request's settle) get the same patience.
    conn.waiting = deque((fut, deadline + 10.0) for fut, deadline in conn.waiting)


async def _received_more_than(upstream: str, before: int) -> None:
    async def received() -> bool:
        return int((await _sim(upstream))["requests_received"]) > before

    await wait_for(received, timeout=5.0, interval=0.02)


async def _rows(gw: Gateway, key_id: str) -> tuple[list[Any], list[Any]]:
    await gw.tenancy.writer.flush()
    async with gw.tenancy.db.engine.connect() as conn:
        spent = (await conn.execute(select(spend).where(spend.c.key_id == key_id))).all()
        audit = (
            await conn.execute(select(request_audit).where(request_audit.c.key_id == key_id))
        ).all()
    return list(spent), list(audit)


async def test_the_upstream_call_leaves_while_the_reservation_is_in_flight(
    upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    async with gateway_via_redis_proxy(upstream, tmp_path, redis_prefix) as (gw, proxy):
        _, key_id, key = await gw.team_and_key("overlap", rpm=100, tpm=100_000, max_parallel=8)
        assert (await gw.chat(key))[0] == 200  # the first request learns the key's room
        _patient(gw)
        before = int((await _sim(upstream))["requests_received"])
        proxy.replies.clear()
        task = asyncio.ensure_future(gw.chat(key))
        # The engine has the request while Redis's answer is still held ...
        await _received_more_than(upstream, before)
        await asyncio.sleep(0.2)
        assert not task.done()  # ... and the client has nothing until the grant
        proxy.replies.set()
        status, headers, body = await asyncio.wait_for(task, 10)
        assert status == 200, body
        assert headers["x-ratelimit-remaining-requests"] == "98"
        spent, audit = await _rows(gw, key_id)
        assert len(spent) == 2 and [a.decision for a in audit] == ["allowed", "allowed"]


async def test_without_room_or_with_overlap_off_the_reservation_comes_first(
    upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    for overlap, rpm in ((False, 100), (True, 2)):
        prefix = f"{redis_prefix}{overlap}:"
        async with gateway_via_redis_proxy(
            upstream, tmp_path / str(overlap), prefix, overlap_reserve=overlap
        ) as (gw, proxy):
            _, _, key = await gw.team_and_key(f"serial-{overlap}", rpm=rpm)
            assert (await gw.chat(key))[0] == 200  # leaves 99 (overlap off) or 1 (no room)
            _patient(gw)
            before = int((await _sim(upstream))["requests_received"])
            proxy.replies.clear()
            task = asyncio.ensure_future(gw.chat(key))
            await asyncio.sleep(0.3)
            assert int((await _sim(upstream))["requests_received"]) == before
            proxy.replies.set()
            assert (await asyncio.wait_for(task, 10))[0] == 200


@pytest.mark.parametrize("stream", [True, False])
async def test_a_refusal_after_the_send_aborts_the_call_and_answers_429_once(
    stream: bool, tmp_path: Path, redis_prefix: str
) -> None:
    """Streamed or not, the engine's work is stopped when the refusal comes (not after the
    8 s answer), the client gets the 429 and nothing of the answer, and the request is
    audited once as refused and not billed."""
    slow = SimConfig(mode="random", output_len=400, decode_ms_per_step=20)  # 8 s per answer
    async with (
        running_sim(slow) as upstream,
        gateway_via_redis_proxy(upstream, tmp_path, redis_prefix) as (gw, proxy),
    ):
        _, key_id, key = await gw.team_and_key("race", rpm=6)
        assert (await gw.chat(key, max_tokens=1))[0] == 200  # 5 left, as this replica knows
        _patient(gw)
        # Another replica takes the rest of the minute behind this one's back.
        tenancy = gw.tenancy
        entry = tenancy.cache.entry(key_id)
        scopes = tenancy.scopes.scopes(entry, "tiny")
        for i in range(5):
            assert not hasattr(await tenancy.limiter.reserve(f"other-{i}", scopes, 1), "reason")
        stats = await _sim(upstream)
        proxy.replies.clear()
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 400,
            "stream": stream,
        }
        headers = {"Authorization": f"Bearer {key}"}

        async def stream() -> tuple[int, dict[str, str], bytes]:
            async with gw.session.post(
                gw.url + "/v1/chat/completions", json=body, headers=headers
            ) as resp:
                return resp.status, dict(resp.headers), await resp.read()

        task = asyncio.ensure_future(stream())
        await _received_more_than(upstream, int(stats["requests_received"]))
        proxy.replies.set()
        status, got, raw = await asyncio.wait_for(task, 5)  # well before the 8 s answer
        assert status == 429, raw
        assert b"rate_limit_error" in raw and b"data:" not in raw  # nothing of the answer
        assert "Retry-After" in got

        async def aborted() -> bool:
            return int((await _sim(upstream))["requests_cancelled"]) > stats["requests_cancelled"]

        await wait_for(aborted, timeout=5.0)  # the engine's work was stopped
        spent, audit = await _rows(gw, key_id)
        assert len(spent) == 1  # the first request only: the refused one is not billed
        assert sorted(a.decision for a in audit) == ["allowed", "refused_requests"]
        async with gw.session.get(gw.url + "/metrics") as resp:
            text = await resp.text()
        assert metric_value(text, "fleetgate_reservations_overlapped_total", answer="refused") == 1
        # and the next request goes the serial way: refused before anything is sent
        stats = await _sim(upstream)
        assert (await gw.chat(key, max_tokens=1))[0] == 429
        assert (await _sim(upstream))["requests_received"] == stats["requests_received"]


async def test_a_request_cancelled_before_its_grant_still_frees_its_slot(
    upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    async with gateway_via_redis_proxy(upstream, tmp_path, redis_prefix) as (gw, proxy):
        _, key_id, key = await gw.team_and_key("leaver", rpm=100, max_parallel=4)
        assert (await gw.chat(key))[0] == 200
        _patient(gw)
        before = int((await _sim(upstream))["requests_received"])
        proxy.replies.clear()
        task = asyncio.ensure_future(gw.chat(key))
        await _received_more_than(upstream, before)
        task.cancel()  # the client leaves while the reservation is unanswered
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)
        proxy.replies.set()
        # The late grant is settled: all four slots are free for four parallel requests.
        results = await asyncio.gather(*(gw.chat(key, max_tokens=64) for _ in range(4)))
        assert [r[0] for r in results] == [200] * 4

        async def settled() -> bool:
            spent, _ = await _rows(gw, key_id)
            return len(spent) >= 5

        await wait_for(settled, timeout=5.0)
        _, audit = await _rows(gw, key_id)
        decisions = sorted(a.decision for a in audit)
        assert decisions.count("allowed") == 5 and "refused_parallel" not in decisions


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open"])
async def test_redis_lost_during_an_overlapped_reservation_follows_the_policy(
    policy: str, upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    async with gateway_via_redis_proxy(
        upstream, tmp_path, redis_prefix, limiter_failure=policy
    ) as (gw, proxy):
        _, key_id, key = await gw.team_and_key("outage", rpm=100)
        assert (await gw.chat(key))[0] == 200
        before = int((await _sim(upstream))["requests_received"])
        proxy.replies.clear()
        task = asyncio.ensure_future(gw.chat(key))
        await _received_more_than(upstream, before)
        await proxy.cut()  # the reply never comes: the connection drops
        status, _, body = await asyncio.wait_for(task, 10)
        # then, with Redis marked down, a request goes the serial way
        serial_status, _, _ = await gw.chat(key)
        _, audit = await _rows(gw, key_id)
        if policy == "fail_closed":
            assert status == 503 and body["error"]["code"] == "limiter_unavailable"
            assert serial_status == 503
            # both 503s are audited, overlapped or not
            assert sorted((a.decision, a.status) for a in audit) == [
                ("allowed", 200),
                ("error", 503),
                ("error", 503),
            ]
        else:
            assert status == 200 and serial_status == 200, body
            assert [a.decision for a in audit] == ["allowed"] * 3


async def test_a_stream_s_full_slot_is_settled_before_its_done_leaves(
    tmp_path: Path, redis_prefix: str
) -> None:
    """A one-slot key's stream: its settle is written and answered before ``[DONE]`` leaves
    (`GatewayRequest.at_end`), so a client that sends its next request the moment it reads
    ``[DONE]``, to any replica, finds the slot free. With Redis's replies held from the
    stream's first event until 0.2 s later, the ``[DONE]`` arrives only once they flow again
    (the stream's own tokens are done after ~0.1 s), and the next request is admitted."""
    sim = SimConfig(mode="random", output_len=6, decode_ms_per_step=20.0)
    async with (
        running_sim(sim) as paced,
        gateway_via_redis_proxy(paced, tmp_path, redis_prefix) as (gw, proxy),
    ):
        _, _, key = await gw.team_and_key("ending", rpm=100, tpm=100_000, max_parallel=1)
        assert (await gw.chat(key))[0] == 200
        _patient(gw)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 6, "stream": True}  # fmt: skip
        loop = asyncio.get_running_loop()
        async with gw.session.post(
            gw.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as resp:
            assert resp.status == 200
            first = await resp.content.readline()
            assert first.startswith(b"data: {"), first
            proxy.replies.clear()  # the settle's reply is held from here ...
            held = loop.time()
            loop.call_later(0.2, proxy.replies.set)  # ... for 0.2 s
            events = 1
            async for line in resp.content:
                if line.startswith(b"data: [DONE]"):
                    done = loop.time() - held
                    break
                events += line.startswith(b"data: {")
            else:
                raise AssertionError("no [DONE]")
        assert events >= 6
        assert 0.19 <= done < 1.0, done  # the end waited for the settle's answer
        status, _, answer = await gw.chat(key)  # the slot is free at once
        assert status == 200, answer
