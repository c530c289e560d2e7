"""Stages around the upstream call: order, refusals, headers, stream and response filters."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from fleetgate.contract.request import FilterResult, GatewayRequest, Outcome
from fleetgate.errors import Overloaded, RateLimited
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream, Reply

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}


class Recorder:
    def __init__(self, name: str, log: list[str], refuse: bool = False) -> None:
        self.name = name
        self.log = log
        self.refuse = refuse
        self.outcomes: list[Outcome] = []

    async def before(self, req: GatewayRequest) -> None:
        self.log.append(f"before:{self.name}")
        req.response_headers[f"x-{self.name}"] = "1"
        if self.refuse:
            raise RateLimited("slow down", retry_after=3)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.log.append(f"after:{self.name}")
        self.outcomes.append(outcome)


async def test_order_headers_and_outcome(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    log: list[str] = []
    a, b = Recorder("a", log), Recorder("b", log)
    cfg = one_alias(upstream)
    cfg["models"][0]["deployments"][0]["price"] = {"input_per_mtok": 1, "output_per_mtok": 2}
    client = await gateway(cfg, stages=[a, b])
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 200
    assert resp.headers["x-a"] == resp.headers["x-b"] == "1"
    assert log == ["before:a", "before:b", "after:b", "after:a"]
    out = a.outcomes[0]
    assert (out.status, out.prompt_tokens, out.completion_tokens) == (200, 10, 2)
    assert out.deployment == "a" and out.upstream_model == "up-model"
    assert out.cost_usd == (10 * 1 + 2 * 2) / 1_000_000


async def test_refusal_runs_after_of_earlier_stages_only(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    log: list[str] = []
    client = await gateway(
        one_alias(upstream), stages=[Recorder("a", log), Recorder("b", log, refuse=True)]
    )
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "3"
    assert resp.headers["x-a"] == "1"
    assert log == ["before:a", "before:b", "after:a"]
    assert not upstream.seen


class HoldAndCut:
    """Holds text back until 'STOP' can be ruled out; replaces the rest with a canned reply."""

    name = "cut"

    def __init__(self) -> None:
        self.held: list[dict[str, Any]] = []

    async def before(self, req: GatewayRequest) -> None:
        req.stream_filters.append(self)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        pass

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        text = chunk["choices"][0]["delta"].get("content") or ""
        if "STOP" in text:
            canned = {**chunk, "choices": [{"index": 0, "delta": {"content": "[removed]"},
                                             "finish_reason": "content_filter"}]}  # fmt: skip
            return FilterResult([canned], stop=True)
        self.held.append(chunk)
        if len(self.held) < 2:
            return FilterResult([])
        out, self.held = self.held, []
        return FilterResult(out)

    async def finish(self) -> FilterResult:
        out, self.held = self.held, []
        return FilterResult(out)


async def _events(resp: Any) -> list[Any]:
    out = []
    for line in (await resp.read()).split(b"\n\n"):
        if line.startswith(b"data: "):
            out.append(line[6:].decode() if line[6:] == b"[DONE]" else orjson.loads(line[6:]))
    return out


async def test_stream_filter_holds_and_stops(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content="one two STOP three four", chunk_delay=0.01))
    client = await gateway(one_alias(upstream), stages=[HoldAndCut()])
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    events = await _events(await client.post("/v1/chat/completions", json=body, headers=AUTH))
    text = "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if e != "[DONE]" and e["choices"]
    )
    assert text == "one[removed]"  # " two" was still held back when the cut came
    assert "three" not in str(events)
    assert events[-1] == "[DONE]"
    finishes = [e["choices"][0]["finish_reason"] for e in events if e != "[DONE]" and e["choices"]]
    assert finishes[-1] == "content_filter"


async def test_stream_filter_flushes_at_end(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content="a b c"))
    client = await gateway(one_alias(upstream), stages=[HoldAndCut()])
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    events = await _events(await client.post("/v1/chat/completions", json=body, headers=AUTH))
    text = "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if e != "[DONE]" and e["choices"]
    )
    assert text == "a b c"
    assert events[-2]["usage"]["completion_tokens"] == 3  # usage after the flushed text


class Shout:
    name = "shout"

    async def before(self, req: GatewayRequest) -> None:
        req.response_filters.append(self)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        pass

    async def apply(self, response: dict[str, Any]) -> dict[str, Any]:
        msg = response["choices"][0]["message"]
        msg["content"] = msg["content"].upper()
        return response


async def test_response_filter(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    client = await gateway(one_alias(upstream), stages=[Shout()])
    data = await (await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)).json()
    assert data["choices"][0]["message"]["content"] == "HELLO THERE."


class Broken:
    name = "broken"

    async def before(self, req: GatewayRequest) -> None:
        raise RuntimeError("a bug in a stage")

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        raise AssertionError("its before did not complete")


async def test_a_bug_in_a_stage_is_a_500_that_earlier_stages_settle(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    log: list[str] = []
    a = Recorder("a", log)
    client = await gateway(one_alias(upstream), stages=[a, Broken()])
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert resp.status == 500
    assert (await resp.json())["error"]["code"] == "internal_error"
    assert (a.outcomes[0].status, a.outcomes[0].error_type) == (500, "internal_error")
    assert not upstream.seen


class GateThenPreempt:
    """Leaves a check in flight (`GatewayRequest.gate`, as tenancy's overlapped reservation
    does) and makes the request requeueable, as the scheduling stage does: the test preempts
    it while the dispatcher waits for the gate after the send, then refuses the gate while it
    waits in the queue again."""

    name = "gate-then-preempt"

    def __init__(self) -> None:
        self.req: GatewayRequest | None = None
        self.task: asyncio.Task[Any] | None = None
        self.queued = asyncio.Event()
        self.log: list[str] = []

    async def before(self, req: GatewayRequest) -> None:
        self.req, self.task = req, asyncio.current_task()
        req.gate = asyncio.get_running_loop().create_future()
        req.requeue = self.requeue

    async def requeue(self) -> None:
        self.queued.set()
        try:
            await asyncio.Event().wait()  # a full pool: nothing frees a slot
        except asyncio.CancelledError:
            self.log.append("left the queue")
            raise

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.log.append(f"after:{outcome.status}")


async def test_a_refusal_while_requeued_ends_the_request_with_it(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    stage = GateThenPreempt()
    client = await gateway(one_alias(upstream), stages=[stage])
    post = asyncio.ensure_future(client.post("/v1/chat/completions", json=CHAT, headers=AUTH))
    async with asyncio.timeout(5):
        while not upstream.seen:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the answer is in: the dispatcher waits for the gate
    req, task = stage.req, stage.task
    assert req is not None and task is not None and req.gate is not None
    req.interrupt = Overloaded("preempted", code="preempted_in_flight", retry_after=1)
    task.cancel()  # preempted before its first byte: back to the queue
    await asyncio.wait_for(stage.queued.wait(), 5)
    req.gate.set_exception(RateLimited("over", retry_after=1))
    resp = await asyncio.wait_for(post, 2)  # not after a slot frees, nor a second send
    assert resp.status == 429, await resp.text()
    assert len(upstream.seen) == 1
    assert stage.log == ["left the queue", "after:429"]
