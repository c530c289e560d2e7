"""Helpers of the scheduling tests: a scheduler over hand-made pools, policies by team."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

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
