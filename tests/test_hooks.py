"""The stage runner every endpoint shares: order, how a request ended, the record, headers."""

from __future__ import annotations

import asyncio

import pytest

from fleetgate.errors import FleetgateError, RateLimited
from fleetgate.hooks import GatewayRequest, Outcome, StageRun
from fleetgate.providers.base import Endpoint
from fleetgate.tenancy.principal import Principal


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
