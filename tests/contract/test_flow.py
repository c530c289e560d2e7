"""Where a request turns after its stages: a cached answer, an interrupt, a requeue, a gate."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from fleetgate.contract.flow import end_reply, interrupter, respond
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.errors import FleetgateError, Overloaded, RateLimited


def request() -> GatewayRequest:
    return GatewayRequest(
        request_id="r1", endpoint=Endpoint.CHAT, principal=Principal("k"), body={"model": "m"},
        alias="m", stream=False, want_usage=False, prompt_tokens=3, max_tokens=0,
    )  # fmt: skip


class Sender:
    """Answers ``send()``; the first ``interrupts`` sends are interrupted by a stage (as the
    scheduler preempts: it sets ``req.interrupt`` and cancels the request's task)."""

    def __init__(
        self,
        req: GatewayRequest,
        interrupts: int,
        requeue: Callable[[], Awaitable[None]] | None,
        started: bool = False,
    ) -> None:
        self.req = req
        self.interrupts = interrupts
        self.requeue = requeue
        self.started = started  # the relay began before the interrupt
        self.sends = 0

    async def __call__(self) -> str:
        self.sends += 1
        if self.sends <= self.interrupts:
            if self.started:
                self.req.outcome.first_token_at = 1.0
            self.req.requeue = self.requeue
            task = asyncio.current_task()
            assert task is not None
            interrupter(self.req, task)(Overloaded("preempted", code="preempted"))
            await asyncio.sleep(0)
        return f"sent {self.sends}"


async def no_replay() -> str:
    raise AssertionError("nothing to replay")


async def test_a_stage_s_answer_is_replayed_and_nothing_is_sent() -> None:
    req = request()
    req.answer = {"id": "cached"}
    sender = Sender(req, 0, None)

    async def replay() -> str:
        return "replayed"

    assert await respond(req, sender, replay) == "replayed"
    assert sender.sends == 0


async def test_an_interrupted_request_goes_back_through_its_stage_and_is_sent_again() -> None:
    req = request()
    requeued: list[str] = []

    async def requeue() -> None:
        requeued.append("back")

    sender = Sender(req, 2, requeue)
    assert await respond(req, sender, no_replay) == "sent 3"
    assert requeued == ["back", "back"]
    assert req.interrupt is None  # taken


async def test_an_interrupt_without_a_way_back_is_the_client_s_error() -> None:
    req = request()
    with pytest.raises(Overloaded, match="preempted"):
        await respond(req, Sender(req, 1, None), no_replay)


async def test_an_interrupt_after_the_first_byte_is_never_answered_twice() -> None:
    req = request()

    async def requeue() -> None:
        raise AssertionError("a started answer is not requeued")

    with pytest.raises(asyncio.CancelledError):
        await respond(req, Sender(req, 1, requeue, started=True), no_replay)


async def test_a_gate_that_refused_meanwhile_ends_the_request_instead_of_the_queue() -> None:
    req = request()
    req.gate = asyncio.get_running_loop().create_future()
    req.gate.set_exception(RateLimited("over", retry_after=1))

    async def requeue() -> None:
        raise AssertionError("a refused request does not queue again")

    sender = Sender(req, 1, requeue)
    with pytest.raises(RateLimited):
        await respond(req, sender, no_replay)
    assert sender.sends == 1
    assert req.gate is None  # waited for


async def test_a_refusal_while_back_in_the_queue_ends_the_wait() -> None:
    req = request()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    req.gate = gate
    waiting = asyncio.Event()

    async def requeue() -> None:
        waiting.set()
        await asyncio.Event().wait()  # a queue that would never admit it

    sender = Sender(req, 1, requeue)
    task = asyncio.create_task(respond(req, sender, no_replay))
    await asyncio.wait_for(waiting.wait(), 5)
    gate.set_exception(RateLimited("over", retry_after=1))
    with pytest.raises(FleetgateError, match="over"):
        await asyncio.wait_for(task, 5)
    assert sender.sends == 1


async def test_a_complete_response_is_not_interrupted() -> None:
    req = request()
    req.outcome.settled = True

    async def send() -> str:
        task = asyncio.current_task()
        assert task is not None
        interrupter(req, task)(Overloaded("preempted", code="preempted"))
        await asyncio.sleep(0)
        return "complete"

    assert await respond(req, send, no_replay) == "complete"
    assert req.interrupt is None


async def test_end_reply_runs_what_waits_for_the_end_once_and_holds_it_bounded() -> None:
    req = request()
    loop = asyncio.get_running_loop()
    ran: list[str] = []
    settled: asyncio.Future[None] = loop.create_future()

    def settle(r: GatewayRequest) -> None:
        ran.append(r.request_id)
        loop.call_later(0.05, settled.set_result, None)
        r.reply_after = [settled]

    req.at_end = [settle]
    began = loop.time()
    await end_reply(req)
    assert settled.done() and loop.time() - began >= 0.04  # the end waited for it
    assert ran == ["r1"] and req.at_end is None and req.reply_after is None
    await end_reply(req)  # a second end (an error after [DONE]) runs nothing again
    assert ran == ["r1"]
    never: asyncio.Future[None] = loop.create_future()
    req.at_end = [lambda r: setattr(r, "reply_after", [never])]
    began = loop.time()
    await end_reply(req)  # a store that never answers holds the end for the bound only
    assert 0.2 <= loop.time() - began < 1.0 and not never.done()
    never.cancel()
