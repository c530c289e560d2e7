"""`Fleet`: the link between a scheduler's pools and the fleet's shared admission in Redis.

Every ``sync_interval_s`` (and at once when a request has to queue) one script call per pool
(`fleet_script.SYNC`, all pools pipelined on the lean Redis connection) renews this process's
leases, publishes its status (requests in flight per team, queue depth per band, the streams
it could cancel, its quota nodes' tokens/s), adds its fair-share charges and reads back the
fleet's counts (`FleetState.apply`). Then it admits what now fits from each pool's queue and
carries out the preemption orders other processes sent it.

A process that dies stops renewing: its leases return to the pool at the first sync of any
process after ``lease_ttl_s``, and another process takes them at its next sync, so within
``lease_ttl_s + 2 x sync_interval_s``. A process that stops (`aclose`) returns them at once.
A new process takes its share at its first sync (max-min fair at contention) without a
restart of the others. Redis unreachable: see `FleetState.unreachable`.

Example::

    fleet = Fleet(resources.redis.commands(url), config.fleet, failure="fail_closed")
    scheduler = Scheduler(config, table, metrics, link=fleet)
    await scheduler.start()              # starts the fleet's sync too
    ...
    await scheduler.aclose()             # hands the leases back
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

from fleetgate.core import Core
from fleetgate.resp import RespClient, RespError, Script
from fleetgate.scheduling.config import BANDS, FleetConfig, SchedulingConfig
from fleetgate.scheduling.fleet_script import SYNC
from fleetgate.scheduling.fleet_state import MAX_ORDER, FailPolicy, FleetState, SyncCall
from fleetgate.scheduling.policy import RequestPolicy
from fleetgate.scheduling.pool import Pool, cuttable, time_to_end
from fleetgate.scheduling.scheduler import Scheduler
from fleetgate.tasks import Background

__all__ = ["Fleet", "fleet_link", "process_id"]

log = logging.getLogger("fleetgate.scheduling.fleet")

_SYNC = Script(SYNC)
DECISIONS_KEPT = 2000  # the fleet's shared decision log: a Redis stream capped at about this
MAX_ENDS = 8  # streams about to end one process publishes per pool and sync, at most
_DOWN = (ConnectionError, TimeoutError, OSError, RespError)


def process_id() -> str:
    """This process among the fleet's: host, pid and 32 random bits (a restart is new)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Fleet:
    """The sync of one process's pools with the fleet (see the module doc)."""

    def __init__(
        self,
        redis: RespClient,
        config: FleetConfig,
        *,
        failure: FailPolicy,
        process: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis  # owned by the resources: never closed here
        self.config = config
        self.failure: FailPolicy = failure
        self.process = process or process_id()
        self._clock = clock
        self._scheduler: Scheduler | None = None
        self._wake = asyncio.Event()
        self._task = Background(self._run, name="fg-fleet")
        self.syncs = 0

    def state(self, alias: str) -> FleetState:
        """A new pool's shared state (the scheduler's ``states``)."""
        state = FleetState(self.process, self.config, self._clock, self.failure)
        state.wake = self._wake.set
        return state

    # ------------------------------------------------------------------ sync

    async def sync(self) -> None:
        """One sync of every pool (the loop's step; tests call it directly)."""
        scheduler = self._scheduler
        if scheduler is None:
            return
        pools = [p for p in scheduler.pools.values() if isinstance(p.state, FleetState)]
        if not pools:
            return
        calls = [self._call(pool) for pool in pools]
        replies = await asyncio.gather(
            *(self._send(pool, call) for pool, call in zip(pools, calls, strict=True)),
            return_exceptions=True,
        )
        self.syncs += 1
        for pool, call, reply in zip(pools, calls, replies, strict=True):
            state = pool.state
            assert isinstance(state, FleetState)
            if isinstance(reply, BaseException):
                if not isinstance(reply, _DOWN):
                    log.error("fleet sync of %s failed", pool.name, exc_info=reply)
                elif state.reachable:
                    log.warning("fleet sync of %s: Redis unreachable (%s)", pool.name, reply)
                state.unreachable(call)
                continue
            for order in state.apply(reply, call):
                self._obey(scheduler, pool, order)
            scheduler.preemption.overdue(pool)
            if pool.queue.size:
                scheduler.admission.drain(pool)
        await self._log_decisions(pools)

    async def _log_decisions(self, pools: list[Pool]) -> None:
        """Append the decisions made since the last sync to the fleet's capped stream."""
        entries: list[str] = []
        for pool in pools:
            state = pool.state
            assert isinstance(state, FleetState)
            while state.decisions:
                entries.append(state.decisions.popleft())
        if not entries:
            return
        key = f"{self.config.key_prefix}decisions"
        cap = str(DECISIONS_KEPT)
        try:
            await asyncio.gather(
                *(self.redis.call("XADD", key, "MAXLEN", "~", cap, "*", "d", e) for e in entries)
            )
        except _DOWN:  # the log is best effort: admission never waits on it
            return

    async def recent_decisions(
        self, limit: int, tenant: str | None = None, alias: str | None = None
    ) -> list[dict[str, Any]]:
        """The fleet's newest scheduling decisions first (every process's, as written at
        its syncs), at most ``limit``, of ``tenant`` / ``alias`` when given. Redis errors
        reach the caller."""
        key = f"{self.config.key_prefix}decisions"
        raw = await self.redis.call("XREVRANGE", key, "+", "-", "COUNT", str(DECISIONS_KEPT))
        out: list[dict[str, Any]] = []
        for _, fields in raw or ():
            try:
                decision = json.loads(fields[1])
            except (ValueError, IndexError, TypeError):
                continue
            if not isinstance(decision, dict):
                continue
            if (tenant is None or decision.get("tenant") == tenant) and (
                alias is None or decision.get("alias") == alias
            ):
                out.append(decision)
                if len(out) >= limit:
                    break
        return out

    def _call(self, pool: Pool) -> SyncCall:
        state = pool.state
        assert isinstance(state, FleetState)
        queued = pool.queue.size
        if queued and state.quotas is not None:
            queued = state.startable(pool.queue.teams())
        return state.prepare(pool.limit, queued)

    def _keys(self, alias: str, target: str) -> list[str]:
        base = f"{self.config.key_prefix}{alias}:"
        return [
            base + "leases",
            base + "seen",
            base + "info",
            base + "vtc",
            f"{base}orders:{self.process}",
            f"{base}orders:{target}",
        ]

    async def _send(self, pool: Pool, call: SyncCall) -> Any:
        state = pool.state
        assert isinstance(state, FleetState)
        target, order = call.order if call.order is not None else (self.process, "")
        args: list[str | int | float] = [
            self.process,
            int(self.config.lease_ttl_s * 1000),
            -1 if call.limit is None else call.limit,
            call.want,
            call.hold,
            state.status(
                pool.queue.depth(),
                _victims(pool),
                pool.queue.teams(),
                pool.critical_seen,
                _ends(pool, self._clock()),
            ),
            order,
            len(call.counters),
        ]
        for team, delta in call.counters:
            args += [team, repr(delta)]
        return await self.redis.eval(_SYNC, self._keys(pool.name, target), args)

    def _obey(self, scheduler: Scheduler, pool: Pool, order: dict[str, Any]) -> None:
        try:
            rank = int(order["rank"])
            band = BANDS[rank]
            by = RequestPolicy(str(order["team"]), band, 1.0, False, 0.0, None)
            owner = bool(order["owner"])
            count = min(MAX_ORDER, max(1, int(order.get("n", 1))))
        except (KeyError, ValueError, TypeError, IndexError):
            return
        scheduler.preemption.obey_order(pool, by, owner, count)

    # ------------------------------------------------------------------ lifecycle

    async def _run(self) -> None:
        interval = self.config.sync_interval_s
        gap = interval / 4  # woken syncs are at least this far apart (bounded rate)
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.sync()
            except Exception:  # never let one bad sync stop the next
                log.exception("fleet sync failed")
            if self._wake.is_set():  # woken again during the sync: not at once
                await asyncio.sleep(gap)

    def attach(self, scheduler: Scheduler) -> None:
        """The scheduler whose pools `sync` syncs (`start` attaches it)."""
        self._scheduler = scheduler

    async def start(self, scheduler: Scheduler) -> None:
        """Start syncing ``scheduler``'s pools (inside the running event loop)."""
        self._scheduler = scheduler
        self._task.start()

    async def aclose(self) -> None:
        """Stop syncing and hand this process's leases back (best effort; idempotent)."""
        await self._task.aclose()
        scheduler = self._scheduler
        if scheduler is None:
            return
        for alias in list(scheduler.pools):
            base = f"{self.config.key_prefix}{alias}:"
            try:
                await self.redis.call("HDEL", base + "leases", self.process)
                await self.redis.call("HDEL", base + "info", self.process)
                await self.redis.call("ZREM", base + "seen", self.process)
            except _DOWN:  # its TTL returns the leases instead
                return


def _victims(pool: Pool) -> list[tuple[int, str]]:
    """(band rank, team) of the streams here another process's starved request may cancel."""
    return [(r.policy.rank, r.policy.team) for r in pool.running if cuttable(r)]


def _ends(pool: Pool, now: float) -> list[tuple[float, float]]:
    """(seconds to its end, seconds per chunk) of the streams here about to end
    (`time_to_end`, which also keeps every stream's pace), at most `MAX_ENDS`."""
    ends = [
        end
        for r in pool.running
        if (end := time_to_end(r, now)) is not None and r.cancel is None  # (a cut one ends now)
    ]
    return sorted(ends)[:MAX_ENDS]


def fleet_link(core: Core, section: SchedulingConfig) -> Fleet | None:
    """The fleet of ``core``'s process: with the settings' ``redis_url`` and
    ``scheduling.fleet.enabled``; None (each process admits alone) otherwise. Redis failures
    follow ``scheduling.fleet.redis_failure``, else ``tenancy.limiter_failure``."""
    url = core.settings.redis_url
    fleet = section.fleet
    if not url or not fleet.enabled:
        return None
    failure = fleet.redis_failure or core.config.tenancy.limiter_failure
    return Fleet(core.resources.redis.commands(url), fleet, failure=failure)
