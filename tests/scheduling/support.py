"""Helpers of the scheduling tests: a scheduler over hand-made pools, policies by team."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.errors import ModelNotFound
from fleetgate.scheduling.config import Band, SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.telemetry.registry import Registry


class NoRoutes:
    """A route table with no aliases: the pools are the test's own."""

    def route(self, alias: str) -> Any:
        raise ModelNotFound(alias)


def scheduler_with_pool(
    capacity: int | None,
    reserve: float = 0.0,
    *,
    clock: Callable[[], float] = time.monotonic,
    **config: Any,
) -> tuple[Scheduler, Pool, Registry]:
    registry = Registry()
    section = SchedulingConfig.model_validate({"critical_reserve": reserve, **config})
    table: Any = NoRoutes()
    scheduler = Scheduler(section, lambda: table, SchedulingMetrics(registry), clock=clock)
    pool = scheduler.pools["p"] = Pool("p", capacity, reserve)
    pool.hold_reserve(clock(), section.critical_reserve_hold_s)  # as `Scheduler.pool` does
    return scheduler, pool, registry


def policy(
    team: str,
    band: Band = "interactive",
    *,
    weight: float = 1.0,
    reject: bool = False,
    max_wait_s: float = 10.0,
    deadline_s: float | None = None,
) -> RequestPolicy:
    return RequestPolicy(team, band, weight, reject, max_wait_s, deadline_s)


class Outcomes:
    """A stage after every other (its ``after`` runs first): the outcomes as billed."""

    name = "outcomes"

    def __init__(self) -> None:
        self.seen: list[tuple[str, Outcome]] = []

    async def before(self, req: GatewayRequest) -> None:
        return None

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.seen.append((req.principal.tenant, outcome))


async def sse_events(response: aiohttp.ClientResponse) -> list[Any]:
    """A streamed answer's events, parsed, with ``"[DONE]"`` as itself."""
    events: list[Any] = []
    async for line in response.content:
        text = line.decode().strip()
        if text.startswith("data: "):
            data = text[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


class Clock:
    """A clock the test moves (``now``)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeOutcome:
    """What the scheduler reads of a request's outcome: the chunks relayed so far, whether
    its response is complete."""

    def __init__(self, relayed: int = 0) -> None:
        self.relayed = relayed
        self.settled = False  # the response is complete: not preemptible
        self.first_token_at: float | None = None
