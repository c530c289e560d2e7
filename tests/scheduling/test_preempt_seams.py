"""The seams of claim preemption (``preempt_streams_for_claims``) with the rest of the path.

A real gateway in-process, over HTTP, before a fake upstream whose stream's timing the test
chooses: a stream is never preempted once its response is complete (its upstream connection
still draining), a preempted stream's interrupt is used once, a client that goes away while
the upstream connection drains does not leak it, a cancellation never lands in another
stage, and a request is requeued at most `MAX_REQUEUES` times.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.flow import interrupted
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.errors import Overloaded
from fleetgate.feature import StageFeature
from tests.scheduling.support import Outcomes, sse_events
from tests.tenancy.support import MASTER, Gateway


def _chunk(i: int, finish: str | None = None) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "tiny",
        "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class Upstream:
    """Streams ``chunks`` chunks, the usage and ``[DONE]``, then holds the connection open
    ``tail_s`` before its end (the terminal chunk comes late); whole answers at once. Records
    each call's first message, and for each stream whether its connection was gone after
    the tail (``dropped``)."""

    def __init__(self, tail_s: float = 0.0, chunks: int = 5, head_s: float = 0.0) -> None:
        self.calls: list[str] = []
        self.dropped: list[bool] = []
        self.tail_s = tail_s
        self.head_s = head_s  # a stream's first byte comes this late
        self.chunks = chunks

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append(body["messages"][0]["content"])
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": "tiny",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                }
            )
        if self.head_s:
            await asyncio.sleep(self.head_s)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = self.chunks
        for i in range(n):
            await resp.write(_chunk(i, "stop" if i == n - 1 else None))
        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        if self.tail_s:
            await asyncio.sleep(self.tail_s)
            self.dropped.append(request.transport is None or request.transport.is_closing())
        try:
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp


@asynccontextmanager
async def _running(
    tmp_path: Path, up: Upstream, outcomes: Outcomes, *extra: Any, on_prepare: Any = None
) -> AsyncIterator[tuple[web.AppRunner, str]]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.chat)
    uprunner = web.AppRunner(app)
    await uprunner.setup()
    await web.TCPSite(uprunner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{uprunner.addresses[0][1]}/v1"
    config = GatewayConfig.model_validate(
        {
            "models": [
                {
                    "alias": "tiny",
                    "deployments": [{"model": "tiny", "api_base": url, "max_num_seqs": 1}],
                }
            ],
            "health": {"probe_interval_s": 30},
            "scheduling": {"preempt_streams_for_claims": "lower_band"},
        }
    )
    settings = Settings(master_key=MASTER, data_dir=tmp_path, watch_config=False)
    stages = [StageFeature(s) for s in (*extra, outcomes)]
    gateway = create_app(settings, config, extra=stages)
    if on_prepare is not None:
        gateway.on_response_prepare.append(on_prepare)
    runner = web.AppRunner(gateway, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield runner, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        await uprunner.cleanup()


def _body(who: str) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": who}],
        "max_tokens": 50,
        "stream": True,
    }


async def _stream(session: aiohttp.ClientSession, url: str, key: str, who: str) -> list[Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(f"{url}/v1/chat/completions", json=_body(who), headers=headers) as r:
        assert r.status == 200, await r.text()
        return await sse_events(r)


async def test_a_stream_complete_but_still_draining_upstream_is_not_preempted(
    tmp_path: Path,
) -> None:
    """The batch stream has relayed everything and ``[DONE]``; the gateway still drains the
    upstream's end (up to half a second), holding the pool's one slot. A critical claim
    arrives then: the stream is not cut nor sent upstream again (its client's connection
    answers its next request), and the claim waits for the slot."""
    up = Upstream(tail_s=0.3)
    outcomes = Outcomes()
    async with _running(tmp_path, up, outcomes) as (runner, url):
        async with aiohttp.ClientSession() as session:
            gw = Gateway(url, runner.app, session)
            batch_team, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            _, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            async with aiohttp.ClientSession() as client:  # one keep-alive connection
                events = await _stream(client, url, batch, "batch")
                # the gateway is now draining the upstream's tail, the slot still held
                status, _, answer = await gw.chat(crit, max_tokens=4)
                assert status == 200, answer
                again = await asyncio.wait_for(_stream(client, url, batch, "again"), 5)
    assert events[-1] == "[DONE]" and all("error" not in e for e in events[:-1])
    assert again[-1] == "[DONE]" and all("error" not in e for e in again[:-1])
    assert up.calls.count("batch") == 1, up.calls  # never sent twice
    first = next(o for team, o in outcomes.seen if team == batch_team)
    assert first.status == 200 and first.completion_tokens == 5  # billed once, in full


async def test_a_client_gone_while_the_upstream_drains_drops_the_upstream_connection(
    tmp_path: Path,
) -> None:
    """The client reads its whole stream and closes its connection while the gateway drains
    the upstream's end: the cancelled drain closes the upstream connection (the upstream sees
    it go), rather than leaving it open and unused."""
    up = Upstream(tail_s=0.4)
    outcomes = Outcomes()
    async with _running(tmp_path, up, outcomes) as (runner, url):
        async with aiohttp.ClientSession() as session:
            gw = Gateway(url, runner.app, session)
            _, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            closing = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(connector=closing) as client:
                events = await _stream(client, url, batch, "batch")
            await asyncio.sleep(0.6)  # past the upstream's tail
    assert events[-1] == "[DONE]"
    assert up.dropped == [True]


async def test_a_stream_is_requeued_at_most_three_times_then_answered_503(
    tmp_path: Path,
) -> None:
    """Each time the batch stream waits for its first byte a critical claim cancels it: it is
    requeued three times (sent upstream again each time, its client sees nothing), and the
    fourth answers it with the retryable 503 and Retry-After instead of a fourth requeue."""
    up = Upstream(head_s=0.5)
    outcomes = Outcomes()
    async with _running(tmp_path, up, outcomes) as (runner, url):
        async with aiohttp.ClientSession() as session:
            gw = Gateway(url, runner.app, session)
            _, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            _, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            headers = {"Authorization": f"Bearer {batch}"}
            post = session.post(f"{url}/v1/chat/completions", json=_body("batch"), headers=headers)
            stream = asyncio.create_task(post.__aenter__())
            for sent in range(1, 5):
                async with asyncio.timeout(5):
                    while up.calls.count("batch") < sent:  # sent upstream, no byte yet
                        await asyncio.sleep(0.01)
                status, _, answer = await gw.chat(crit, max_tokens=4)
                assert status == 200, answer
            resp = await asyncio.wait_for(stream, 5)
            body = await resp.json()
            resp.release()
    assert resp.status == 503 and "Retry-After" in resp.headers
    assert body["error"]["code"] == "preempted_in_flight"
    assert up.calls.count("batch") == 4


class HoldFirst:
    """A stage after the scheduler's whose ``before`` waits for ``release`` on the first
    request it sees (a guardrail calling out, say)."""

    name = "hold-first"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = asyncio.Event()
        self._seen = False

    async def before(self, req: GatewayRequest) -> None:
        if not self._seen:
            self._seen = True
            self.holding.set()
            await self.release.wait()

    def after(self, req: GatewayRequest, outcome: Any) -> None:
        return None


async def test_a_claim_never_cancels_a_stream_inside_another_stage(tmp_path: Path) -> None:
    """The batch stream is admitted (the pool's one slot) and waits in a later stage when a
    critical claim picks it: the cancellation waits for its send, so the stage finishes, the
    stream is requeued behind the claim, and answered in full."""
    up = Upstream()
    outcomes = Outcomes()
    hold = HoldFirst()
    async with _running(tmp_path, up, outcomes, hold) as (runner, url):
        async with aiohttp.ClientSession() as session:
            gw = Gateway(url, runner.app, session)
            batch_team, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            crit_team, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            stream = asyncio.create_task(_stream(session, url, batch, "batch"))
            await asyncio.wait_for(hold.holding.wait(), 5)
            claim = asyncio.create_task(gw.chat(crit, max_tokens=4))
            await asyncio.sleep(0.2)  # the claim is queued and has picked the stream
            hold.release.set()
            status, _, answer = await asyncio.wait_for(claim, 5)
            events = await asyncio.wait_for(stream, 5)
    assert status == 200, answer
    assert events[-1] == "[DONE]" and all("error" not in e for e in events[:-1])
    assert len([e for e in events if e != "[DONE]" and e.get("choices")]) == 5
    assert [(t, o.status) for t, o in outcomes.seen] == [(crit_team, 200), (batch_team, 200)]


async def test_a_stream_cancelled_while_its_headers_are_prepared_ends_with_the_error(
    tmp_path: Path,
) -> None:
    """The claim's cancellation lands while the stream's response headers are being prepared
    (a slow ``on_response_prepare``): the headers are sent whole, then the retryable error
    event and ``[DONE]``, not an empty or broken answer."""
    preparing = asyncio.Event()

    async def slow_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if response.headers.get("Content-Type") == "text/event-stream":
            preparing.set()
            await asyncio.sleep(0.5)

    up = Upstream()
    outcomes = Outcomes()
    async with _running(tmp_path, up, outcomes, on_prepare=slow_prepare) as (runner, url):
        async with aiohttp.ClientSession() as session:
            gw = Gateway(url, runner.app, session)
            batch_team, _, batch = await gw.team_and_key("etl", tags={"priority": "batch"})
            _, _, crit = await gw.team_and_key("oncall", tags={"priority": "critical"})
            stream = asyncio.create_task(_stream(session, url, batch, "batch"))
            await asyncio.wait_for(preparing.wait(), 5)
            status, _, answer = await gw.chat(crit, max_tokens=4)
            assert status == 200, answer
            events = await asyncio.wait_for(stream, 5)
    assert events[-1] == "[DONE]"
    assert [e["error"]["code"] for e in events[:-1]] == ["preempted_in_flight"]
    billed = next(o for team, o in outcomes.seen if team == batch_team)
    assert billed.status == 503 and billed.completion_tokens == 0


def _request() -> GatewayRequest:
    return GatewayRequest(
        request_id="r1", endpoint=Endpoint.CHAT, principal=Principal("k"), body={"model": "m"},
        alias="m", stream=True, want_usage=False, prompt_tokens=3, max_tokens=0,
    )  # fmt: skip


async def test_an_interrupt_is_taken_once_so_a_later_cancellation_propagates() -> None:
    """After a preemption has been answered (the relay writing its error), the client going
    away cancels the task again: that cancellation is a disconnect, not the preemption again
    (which would requeue a request whose client is gone)."""
    req = _request()
    seen: list[object] = []
    started = asyncio.Event()

    async def handler() -> None:
        try:
            started.set()
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(interrupted(req))  # the preemption: answered with its error
        try:
            await asyncio.sleep(10)  # writing the error; the client goes away
        except asyncio.CancelledError:
            seen.append(interrupted(req))
            raise

    task = asyncio.create_task(handler())
    await started.wait()
    error = Overloaded("cut", code="preempted_in_flight")
    req.interrupt = error
    task.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()  # the client disconnects
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert seen == [error, None]
    assert task.cancelled()
