"""Helpers of the scheduling tests: a scheduler over hand-made pools, policies by team."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from fleetgate.app import create_app
from fleetgate.config.settings import Settings
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.errors import ModelNotFound
from fleetgate.scheduling.config import Band, SchedulingConfig
from fleetgate.scheduling.metrics import SchedulingMetrics
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.telemetry.registry import Registry
from tests.tenancy.support import MASTER, Gateway


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


class Reloadable:
    """A gateway started from a config file the test rewrites (`reload`)."""

    def __init__(self, gw: Gateway, path: Path) -> None:
        self.gw = gw
        self.path = path

    async def reload(self, config: dict[str, Any]) -> None:
        """Write ``config`` to the gateway's file and reload it (which must succeed)."""
        self.path.write_text(json.dumps(config))
        status, body = await self.gw.admin("POST", "/admin/config/reload")
        assert status == 200, body


@asynccontextmanager
async def reloadable_gateway(tmp_path: Path, config: dict[str, Any]) -> AsyncIterator[Reloadable]:
    """A gateway on ``config`` written to ``tmp_path/gateway.yaml`` (teams' ids, known only
    once it runs, come in by `Reloadable.reload`), served over HTTP with handler
    cancellation (a client that hangs up cancels its request)."""
    path = tmp_path / "gateway.yaml"
    path.write_text(json.dumps(config))
    settings = Settings(master_key=MASTER, data_dir=tmp_path, watch_config=False, config_path=path)
    runner = web.AppRunner(create_app(settings), handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            yield Reloadable(Gateway(url, runner.app, session), path)
    finally:
        await runner.cleanup()
