"""The stage runner every endpoint shares: order, how a request ended, the record, headers."""

from __future__ import annotations

import asyncio

import pytest

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.contract.stages import Stage, StageRun
from fleetgate.errors import FleetgateError, RateLimited


class Seen:
    def __init__(self, name: str, log: list[str], refuse: BaseException | None = None) -> None:
        self.name = name
        self.log = log
        self.refuse = refuse
        self.outcomes: list[Outcome] = []

    async def before(self, req: GatewayRequest) -> None:
        self.log.append(f"before:{self.name}")
        req.response_headers[f"x-{self.name}"] = "1"
        if self.refuse is not None:
            raise self.refuse

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.log.append(f"after:{self.name}:{outcome.status}:{outcome.error_type}")
        self.outcomes.append(outcome)


def request() -> GatewayRequest:
    return GatewayRequest(
        request_id="r1", endpoint=Endpoint.CHAT, principal=Principal("k"), body={"model": "m"},
        alias="m", stream=False, want_usage=False, prompt_tokens=3, max_tokens=0,
    )  # fmt: skip


async def test_stages_wrap_the_block_and_the_record_comes_before_their_after() -> None:
    log: list[str] = []
    req = request()
    run = StageRun([Seen("a", log), Seen("b", log)], req, record=lambda r: log.append("record"))
    async with run as outcome:
        log.append("upstream")
        outcome.completion_tokens = 5
    assert log == ["before:a", "before:b", "upstream", "record", "after:b:200:None",
                   "after:a:200:None"]  # fmt: skip
    assert req.outcome is outcome and outcome.alias == "m" and outcome.latency_s >= 0


async def test_a_refusal_settles_the_earlier_stages_and_carries_their_headers() -> None:
    log: list[str] = []
    req = request()
    refusal = RateLimited("slow down", retry_after=3)
    stages = [Seen("a", log), Seen("b", log, refuse=refusal), Seen("c", log)]
    with pytest.raises(RateLimited):
        async with StageRun(stages, req, record=lambda r: log.append("record")):
            log.append("upstream")
    assert log == ["before:a", "before:b", "record", "after:a:429:rate_limit_error"]
    assert refusal.headers["x-a"] == refusal.headers["x-b"] == "1"
    assert req.outcome.overhead_s > 0  # no upstream was reached: the time was ours


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (RuntimeError("bug"), 500, "internal_error"),
        (asyncio.CancelledError(), 499, "client_disconnected"),
        (FleetgateError("teapot"), 500, "api_error"),
    ],
)
async def test_how_the_block_ended_is_the_outcome_and_the_error_propagates(
    error: BaseException, status: int, kind: str
) -> None:
    log: list[str] = []
    with pytest.raises(type(error)):
        async with StageRun([Seen("a", log)], request()) as outcome:
            raise error
    assert (outcome.status, outcome.error_type) == (status, kind)
    assert log[-1] == f"after:a:{status}:{kind}"


class Gating:
    """A stage that leaves its check in flight, as tenancy does with an overlapped reservation."""

    name = "gating"

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.gate: asyncio.Future[None] | None = None

    async def before(self, req: GatewayRequest) -> None:
        self.gate = req.gate = asyncio.get_running_loop().create_future()

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.log.append(f"after:gating:{outcome.status}")


class Answering:
    name = "cache"

    async def before(self, req: GatewayRequest) -> None:
        req.answer = {"choices": []}

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        pass


async def test_a_gate_is_waited_for_before_a_block_that_does_not_overlap_it() -> None:
    log: list[str] = []
    gating = Gating(log)
    req = request()
    run = StageRun([gating], req)
    entered = asyncio.ensure_future(run.__aenter__())
    await asyncio.sleep(0.01)
    assert not entered.done()  # no block before the verdict
    assert gating.gate is not None
    gating.gate.set_exception(RateLimited("over", retry_after=1))
    with pytest.raises(RateLimited):
        await entered
    assert log == ["after:gating:429"] and req.outcome.error_type == "rate_limit_error"


@pytest.mark.parametrize("refuse", [True, False])
async def test_a_stage_answering_itself_waits_for_the_gate_even_when_overlapping(
    refuse: bool,
) -> None:
    log: list[str] = []
    gating = Gating(log)
    req = request()
    run = StageRun([gating, Answering()], req, overlap=True)
    entered = asyncio.ensure_future(run.__aenter__())
    await asyncio.sleep(0.01)
    assert not entered.done()  # a cache hit is an answer too: not before the verdict
    assert gating.gate is not None
    if refuse:
        gating.gate.set_exception(RateLimited("over", retry_after=1))
        with pytest.raises(RateLimited):
            await entered
    else:
        gating.gate.set_result(None)
        await entered
        assert req.gate is None
        await run.__aexit__(None, None, None)
        assert log == ["after:gating:200"]


@pytest.mark.parametrize("later_fails", [True, False])
async def test_a_refusal_outranks_how_a_later_stage_or_the_block_ended(later_fails: bool) -> None:
    log: list[str] = []
    gating = Gating(log)
    req = request()
    stages: list[Stage] = [gating]
    if later_fails:
        stages.append(Seen("safety", log, FleetgateError("blocked")))

    def refuse() -> None:
        assert gating.gate is not None
        gating.gate.set_exception(RateLimited("over", retry_after=1))

    asyncio.get_running_loop().call_later(0.01, refuse)  # the reply comes after the failure
    with pytest.raises(RateLimited):
        async with StageRun(stages, req, overlap=True):
            raise FleetgateError("the upstream failed")
    assert req.outcome.status == 429
    assert log[-1] == "after:gating:429"


async def test_a_cancelled_wait_leaves_the_gate_for_the_next_one() -> None:
    """A preempted request is cancelled while it waits (then requeued): its gate stays, and
    the refusal still reaches whoever waits next."""
    from fleetgate.contract.flow import pass_gate

    req = request()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    req.gate = gate
    waiter = asyncio.ensure_future(pass_gate(req))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert req.gate is gate and not gate.cancelled()
    gate.set_exception(RateLimited("over", retry_after=1))
    with pytest.raises(RateLimited):
        await pass_gate(req)
    assert req.gate is None


class Answered(Seen):
    """A stage during which the gate's answer comes (the reservation's reply arrives while
    the multimodal or safety stage works)."""

    def __init__(self, name: str, log: list[str], gating: Gating) -> None:
        super().__init__(name, log)
        self.gating = gating

    async def before(self, req: GatewayRequest) -> None:
        await super().before(req)
        assert self.gating.gate is not None
        self.gating.gate.set_exception(RateLimited("over", retry_after=1))
        await asyncio.sleep(0)


async def test_a_refusal_known_between_stages_stops_the_stages_after_it() -> None:
    """Serially the refused request would never reach the later stages: once the refusal is
    in, it must not queue for a pool slot (the scheduling stage, where it could displace
    another tenant's waiter) nor run further checks."""
    log: list[str] = []
    gating = Gating(log)
    req = request()
    stages: list[Stage] = [gating, Answered("safety", log, gating), Seen("scheduling", log)]
    with pytest.raises(RateLimited):
        async with StageRun(stages, req, overlap=True):
            log.append("upstream")
    assert "before:scheduling" not in log and "upstream" not in log
    assert req.outcome.status == 429 and req.gate is None


class Queued(Seen):
    """A stage that waits (the scheduling stage's admission queue) until it is let in."""

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(name, log)
        self.let_in = asyncio.Event()

    async def before(self, req: GatewayRequest) -> None:
        await super().before(req)
        try:
            await self.let_in.wait()
        except asyncio.CancelledError:
            self.log.append(f"left:{self.name}")  # the queue position given back
            raise


async def test_a_refusal_during_a_stage_s_wait_ends_the_wait() -> None:
    """A request refused while it waits in the admission queue leaves the queue at once with
    the 429 (it no longer holds a position, nor takes a pool slot when let in)."""
    log: list[str] = []
    gating = Gating(log)
    queued = Queued("scheduling", log)
    req = request()

    def refuse() -> None:
        assert gating.gate is not None
        gating.gate.set_exception(RateLimited("over", retry_after=1))

    asyncio.get_running_loop().call_later(0.01, refuse)

    async def run() -> None:
        async with StageRun([gating, queued], req, overlap=True):
            log.append("upstream")

    with pytest.raises(RateLimited):
        await asyncio.wait_for(run(), 2)
    assert "left:scheduling" in log and "upstream" not in log
    assert req.outcome.status == 429 and req.gate is None
    assert log[-1] == "after:gating:429"


class Holds(Seen):
    """A stage whose ``after`` leaves something the reply must wait for (tenancy's settle of a
    full parallel slot)."""

    def __init__(self, log: list[str], done_after_s: float | None) -> None:
        super().__init__("hold", log)
        self.done_after_s = done_after_s
        self.future: asyncio.Future[None] | None = None

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        super().after(req, outcome)
        loop = asyncio.get_running_loop()
        self.future = loop.create_future()
        if self.done_after_s is not None:
            loop.call_later(self.done_after_s, self.future.set_result, None)
        req.reply_after = [self.future]


async def test_the_reply_waits_for_what_an_after_left_and_no_longer_than_the_bound() -> None:
    log: list[str] = []
    req = request()
    stage = Holds(log, done_after_s=0.05)
    async with StageRun([stage], req):
        pass
    assert stage.future is not None and stage.future.done()  # waited for before the exit
    assert req.reply_after is None
    slow = Holds(log, done_after_s=None)  # never done: the reply goes after the bound
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with StageRun([slow], request()):
        pass
    assert 0.2 <= loop.time() - began < 1.0
    assert slow.future is not None and not slow.future.done()  # left running, not cancelled
    slow.future.cancel()


async def test_a_failed_hold_does_not_change_how_the_request_ended() -> None:
    log: list[str] = []
    stage = Holds(log, done_after_s=None)
    with pytest.raises(RateLimited):
        async with StageRun([stage], request()):
            assert stage.future is None
            raise RateLimited("slow down", retry_after=1)
    assert stage.future is not None
    stage.future.set_exception(RuntimeError("the store went away"))  # its owner's to handle
    stage.future.exception()


async def test_a_later_stages_refusal_waits_for_what_an_earlier_after_left() -> None:
    log: list[str] = []
    hold = Holds(log, done_after_s=0.05)
    refusal = RateLimited("slow down", retry_after=1)
    with pytest.raises(RateLimited):
        async with StageRun([hold, Seen("b", log, refuse=refusal)], request()):
            pass
    assert hold.future is not None and hold.future.done()  # waited for before the refusal
