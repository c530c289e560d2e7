"""`Reclaimer`: samples the pools, and on the replica that holds the lease reclaims idle ones.

Every replica, every ``sample_interval_s``: one utilisation sample per pool (`usage`), and
its traffic (requests per alias, from the stage; per pool, from the deployments' last request)
published to the others every ``activity_interval_s`` (shared kind ``reclaim_activity``).

The replica holding the lease (`DatabaseLease`), after each sample: a pool that is awake, was
observed for its whole window, stayed under its threshold and passes the guard
(`fleetgate.reclaim.guard`) is reclaimed:

- ``sleep``: its state becomes ``asleep`` in the shared kind ``reclaim_pools`` (every replica
  marks the deployment asleep within a poll, so its next request wakes it first), and after
  ``settle_s``, unless a request woke it meanwhile or it has requests in flight, the engine
  gets ``POST /sleep``. The dispatcher's waker (`fleetgate.routing.wake.Waker`) wakes it for
  the next request on any replica; that replica publishes the pool ``awake``.
- ``scale_to_zero``: its state becomes ``scaled_down``: ``fleetgate_reclaim_keep`` drops to 0
  on every replica and KEDA, whose trigger reads it, scales the pool's Deployment to zero; the
  next request for an alias that needs it is held (``fleetgate_held_requests``, KEDA's
  activation) and publishes the pool ``awake`` again.

Every reclaim, every skip of an idle pool (once per reason) and every wake-up is written to the
admin audit and kept in `decisions` (``GET /admin/reclaim``). A state change starts the pool's
window again.

Why one module: `Reclaimer` is one state machine per pool (awake -> asleep or scaled_down ->
awake) driven from four entry points (`sample_once`, `watch_once`, `apply_pools`,
`apply_activity`) that read and write the same private state: the pool states and their epochs
(`_take`, `_write`), the utilisation window, the other replicas' traffic, the audit throttle
(`_skipped`) and the found-awake timers (`_awake_seen`). The races it guards against (a request
waking a pool within ``settle_s``, another replica moving it first, an engine that sleeps while
shared as awake) are handled across those steps; split into sampling, deciding and following
modules, each would reach into the others' private state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from fleetgate.reclaim.config import ReclaimConfig, ReclaimPool
from fleetgate.reclaim.guard import only_capacity
from fleetgate.reclaim.lease import DatabaseLease
from fleetgate.reclaim.metrics import ReclaimMetrics
from fleetgate.reclaim.probe import PoolProbe
from fleetgate.reclaim.usage import Traffic, UsageWindow
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.reload import TableManager
from fleetgate.store.shared import SharedState

__all__ = ["Assessment", "PoolState", "Reclaimer"]

log = logging.getLogger("fleetgate.reclaim")

_HEARTBEAT_S = 60.0  # a replica's traffic row is rewritten at least this often

Audit = Callable[[str, str, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class PoolState:
    """A pool's shared state (the body of its row in ``reclaim_pools``)."""

    state: str = "awake"  # awake | asleep | scaled_down
    epoch: int = 0  # the kind's version when it was written: newer wins
    since: float = 0.0  # wall-clock seconds
    by: str = ""  # the replica that wrote it
    reason: str = ""

    @classmethod
    def of(cls, body: Any) -> PoolState | None:
        if not isinstance(body, dict):
            return None
        try:
            return cls(str(body["state"]), int(body["epoch"]), float(body["since"]),
                       str(body.get("by", "")), str(body.get("reason", "")))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Assessment:
    """What the acting replica would do with a pool now, and why."""

    candidate: bool  # idle for its whole window: reclaimed unless the guard says no
    code: str  # reclaimed | busy | observing | only_capacity | idle
    text: str
    utilisation_pct: float | None
    observed_s: float


class Reclaimer:
    """One per gateway process (see the module docstring)."""

    def __init__(
        self,
        config: ReclaimConfig,
        tables: TableManager,
        probe: PoolProbe,
        metrics: ReclaimMetrics,
        lease: DatabaseLease,
        pools_state: SharedState,
        activity: SharedState,
        audit: Audit,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.tables = tables
        self.probe = probe
        self.metrics = metrics
        self.lease = lease
        self.pools_state = pools_state
        self.activity = activity
        self.audit = audit
        self.clock = clock
        self.owner = lease.owner
        self.usage = UsageWindow()
        self.traffic = Traffic()
        self.states: dict[str, PoolState] = {}
        self.decisions: deque[dict[str, Any]] = deque(maxlen=200)
        self._skipped: dict[str, tuple[str, float]] = {}  # pool -> (reason, when) last audited
        self._published_at = 0.0
        self._sampled_at: dict[str, float] = {}
        self._warned_at = 0.0
        self._published: dict[str, Any] = {}
        self._lease_at = 0.0
        self._awake_seen: dict[str, float] = {}  # pool -> first seen awake while shared asleep
        self.configure(config)

    def configure(self, config: ReclaimConfig) -> None:
        self.config = config
        longest = max(config.window(p) for p in config.pools)
        self.usage.keep_s = longest + 3 * config.sample_interval_s
        self.usage.forget({p.deployment for p in config.pools})

    # ------------------------------------------------------------------ lookups

    def _deployments(self) -> dict[str, Deployment]:
        return {d.id: d for d in self.tables.table.deployments()}

    def state(self, pool: str) -> PoolState:
        return self.states.get(pool, PoolState())

    def _wall(self, monotonic_at: float) -> float:
        """A ``time.monotonic()`` instant on the wall clock (0 stays 0: never)."""
        if monotonic_at <= 0:
            return 0.0
        return self.clock() - (time.monotonic() - monotonic_at)

    def _remote_in_flight(self, pool: str, now: float) -> int:
        # a replica republishes unchanged traffic once a minute: a long stream stays counted
        fresh = now - (_HEARTBEAT_S + 3 * self.config.activity_interval_s)
        return sum(
            int(body.get("in_flight", {}).get(pool, 0))
            for body in self.traffic.remote.values()
            if float(body.get("at", 0.0)) >= fresh
        )

    # ------------------------------------------------------------------ shared state

    def apply_pools(self, bodies: dict[str, Any]) -> None:
        """Follower of ``reclaim_pools``: take every newer pool state; mark the deployments of
        pools put to sleep asleep here (their next request wakes them) and awake ones awake."""
        deps = self._deployments()
        for name, body in bodies.items():
            new = PoolState.of(body)
            if new is None or new.epoch <= self.state(name).epoch:
                continue
            self._take(name, new, deps.get(name))

    def _take(self, pool: str, new: PoolState, dep: Deployment | None) -> None:
        old = self.state(pool)
        self.states[pool] = new
        if new.state != old.state:
            self.usage.restart(pool)
            self._skipped.pop(pool, None)
        if dep is not None and self._action(pool) == "sleep":
            if new.state == "asleep":
                dep.state.asleep = True  # its next request here wakes it first
            elif old.state == "asleep":
                dep.state.asleep = False  # woken elsewhere (never undoes the waker's own view)

    def _window_of(self, pool: str) -> float:
        for p in self.config.pools:
            if p.deployment == pool:
                return self.config.window(p)
        return self.config.window_s

    def _action(self, pool: str) -> str | None:
        for p in self.config.pools:
            if p.deployment == pool:
                return p.action
        return None

    def apply_activity(self, bodies: dict[str, Any]) -> None:
        """Follower of ``reclaim_activity``: the other replicas' traffic."""
        self.traffic.remote = {
            name: body for name, body in bodies.items()
            if name != self.owner and isinstance(body, dict)
        }  # fmt: skip

    async def _write(self, pool: str, state: str, reason: str) -> PoolState:
        """Write ``pool``'s new state (a new epoch) and take it here at once."""
        now = self.clock()

        def body(version: int) -> dict[str, Any]:
            return asdict(PoolState(state, version, now, self.owner, reason))

        epoch = await self.pools_state.put_stamped(pool, body)
        new = PoolState(state, epoch, now, self.owner, reason)
        self._take(pool, new, self._deployments().get(pool))
        return new

    # ------------------------------------------------------------------ traffic (the stage)

    def seen(self, alias: str) -> None:
        """A request for ``alias`` reached this replica."""
        self.traffic.alias_seen(alias, self.clock())

    async def publish_activity(self, *, force: bool = False) -> None:
        """This replica's traffic for the others, when it changed (or ``force``)."""
        now = self.clock()
        deps = self._deployments()
        in_flight = {}
        for pool in self.config.pools:
            dep = deps.get(pool.deployment)
            if dep is not None:
                self.traffic.pool_seen(pool.deployment, self._wall(dep.state.last_request_at))
                in_flight[pool.deployment] = dep.state.in_flight
        body = self.traffic.body(now, in_flight)
        changed = {k: v for k, v in body.items() if k != "at"} != self._published
        due = now - self._published_at >= self.config.activity_interval_s
        if force or (changed and due) or now - self._published_at >= _HEARTBEAT_S:
            await self.activity.put(self.owner, body)
            self._published = {k: v for k, v in body.items() if k != "at"}
            self._published_at = now

    # ------------------------------------------------------------------ sampling

    async def _sample(self, pool: ReclaimPool, dep: Deployment, now: float) -> None:
        interval = self.config.sample_interval_s
        util = await self.probe.dcgm_util(pool.dcgm) if pool.dcgm else None
        if util is None:  # busy: any request since the previous sample, here or elsewhere
            recent = max(now - 3 * interval, self._sampled_at.get(pool.deployment, now - interval))
            local = dep.state.in_flight > 0 or self._wall(dep.state.last_request_at) >= recent
            remote = (
                self._remote_in_flight(pool.deployment, now) > 0
                or self.traffic.last("pools", pool.deployment) >= recent
            )
            busy = local or remote or await self.probe.engine_busy(dep) is True
            util = 100.0 if busy else 0.0
        self._sampled_at[pool.deployment] = now
        self.usage.add(pool.deployment, util_pct=util, at=now, interval_s=interval)

    async def sample_once(self) -> None:
        """One sample of every awake pool; then, on the acting replica, the decisions."""
        now = self.clock()
        deps = self._deployments()
        pools = [(p, deps[p.deployment]) for p in self.config.pools if p.deployment in deps]
        awake = [(p, d) for p, d in pools if self.state(p.deployment).state == "awake"]
        await asyncio.gather(*(self._sample(p, d, now) for p, d in awake))
        if self.lease.leader:
            for pool, dep in awake:
                if pool.action == "sleep" and await self._found_asleep(pool, dep):
                    continue
                await self._decide(pool, dep, now)
            asleep = [(p, d) for p, d in pools if self.state(p.deployment).state == "asleep"]
            for pool, dep in asleep:
                await self._found_awake(pool, dep, now)

    async def _found_asleep(self, pool: ReclaimPool, dep: Deployment) -> bool:
        """An engine that sleeps while its pool is shared as awake (a request that woke it in
        the instant before its sleep, another tool's ``POST /sleep``) is shared as asleep, so
        the next request on any replica wakes it instead of being refused by it."""
        if dep.state.asleep or await self.probe.is_sleeping(dep) is not True:
            return False
        text = "the engine sleeps while shared as awake: marked asleep for its next request"
        dep.state.asleep = True
        try:
            await self._write(pool.deployment, "asleep", text)
        except BaseException:
            dep.state.asleep = False
            raise
        entry = self._log("found_asleep", pool.deployment, text)
        log.warning("reclaim: %s %s", pool.deployment, text)
        await self.audit("found_asleep", pool.deployment, entry)
        return True

    async def _found_awake(self, pool: ReclaimPool, dep: Deployment, now: float) -> None:
        """A pool shared as asleep whose engine answers awake (woken by a request on a replica
        that learnt of the sleep only afterwards, or behind the gateway's back) is shared as
        awake again, so no replica's next request waits on a wake-up that does nothing. Not
        within ``settle_s`` (and a sample) of the sleep: the engine is still awake then."""
        if not dep.state.asleep:  # a request here woke it: `_follow_wakes` shares that
            return
        settling = self.config.settle_s + self.config.sample_interval_s
        if now - self.state(pool.deployment).since < settling:
            return
        if await self.probe.is_sleeping(dep) is not False:
            self._awake_seen.pop(pool.deployment, None)
            return
        # the replica whose request woke it shares that within its activity interval and a
        # poll: only a mismatch that outlasts it is this replica's to mend
        first = self._awake_seen.setdefault(pool.deployment, now)
        if now - first < 2 * self.config.activity_interval_s + 1.0:
            return
        del self._awake_seen[pool.deployment]
        dep.state.asleep = False
        await self._woken(pool.deployment, "the engine was found awake while shared as asleep")

    # ------------------------------------------------------------------ decisions

    def assess(self, pool: ReclaimPool, dep: Deployment, now: float) -> Assessment:
        """Whether ``pool`` is idle enough to reclaim and what the guard says."""
        window, threshold = self.config.window(pool), self.config.threshold(pool)
        util, _ = self.usage.mean(pool.deployment, now - window)
        observed = min(window, self.usage.span(pool.deployment, now))
        state = self.state(pool.deployment)
        if state.state != "awake":
            return Assessment(False, "reclaimed", f"{state.state}: {state.reason}", util, observed)
        if util is not None and util >= threshold:
            text = f"utilisation {util:.1f}% >= {threshold:g}%"
            return Assessment(False, "busy", text, util, observed)
        if util is None or observed < window - 0.5 * self.config.sample_interval_s:
            text = f"observed {observed:.0f} s of the {window:g} s window"
            return Assessment(False, "observing", text, util, observed)
        reclaimed = {name for name, s in self.states.items() if s.state != "awake"}
        since = now - window
        reason = only_capacity(
            self.tables.table, dep, reclaimed=reclaimed,
            had_traffic=lambda alias: self.traffic.last("aliases", alias) >= since,
        )  # fmt: skip
        if reason is not None:
            return Assessment(True, "only_capacity", reason, util, observed)
        text = f"utilisation {util:.1f}% < {threshold:g}% for {window:g} s"
        return Assessment(True, "idle", text, util, observed)

    def _log(self, action: str, pool: str, reason: str, **extra: Any) -> dict[str, Any]:
        entry = {"at": self.clock(), "pool": pool, "action": action, "reason": reason,
                 "replica": self.owner, **extra}  # fmt: skip
        self.decisions.append(entry)
        return entry

    async def _skip(self, pool: str, code: str, reason: str, util: float | None) -> None:
        self.metrics.skips.labels(pool, code).inc()
        now, (last_code, last_at) = self.clock(), self._skipped.get(pool, ("", 0.0))
        if last_code == code and now - last_at < self._window_of(pool):
            return  # audited once per reason and window, not once per sample
        self._skipped[pool] = (code, now)
        entry = self._log("skip", pool, reason, code=code, utilisation_pct=util)
        log.info("reclaim: %s kept: %s", pool, reason)
        await self.audit("skip", pool, entry)

    async def _decide(self, pool: ReclaimPool, dep: Deployment, now: float) -> None:
        seen = self.assess(pool, dep, now)
        if not seen.candidate:
            return
        if seen.code == "only_capacity":
            await self._skip(pool.deployment, "only_capacity", seen.text, seen.utilisation_pct)
            return
        if dep.state.in_flight or self._remote_in_flight(pool.deployment, now):
            text = "requests in flight to it"
            await self._skip(pool.deployment, "in_flight", text, seen.utilisation_pct)
            return
        if pool.action == "sleep":
            await self._sleep(pool, dep, seen)
        else:
            await self._write(pool.deployment, "scaled_down", seen.text)
            await self._acted("scale_to_zero", pool.deployment, seen)

    async def _acted(self, action: str, pool: str, seen: Assessment) -> None:
        self.metrics.actions.labels(pool, action).inc()
        entry = self._log(action, pool, seen.text, utilisation_pct=seen.utilisation_pct,
                          observed_s=seen.observed_s)  # fmt: skip
        log.info("reclaim: %s %s (%s)", action, pool, seen.text)
        await self.audit(action, pool, entry)

    async def _sleep(self, pool: ReclaimPool, dep: Deployment, seen: Assessment) -> None:
        # Asleep here before the shared write: a request arriving now is woken first, and
        # the watch never mistakes the gap for a wake-up.
        dep.state.asleep = True
        try:
            marked = await self._write(pool.deployment, "asleep", seen.text)
        except BaseException:
            dep.state.asleep = False
            raise
        await asyncio.sleep(self.config.settle_s)  # every replica marks it asleep meanwhile
        # woken: elsewhere (a newer epoch), or here (the waker cleared the mark; the watch
        # shares it only on its next tick: a sleep now would leave this replica, and an
        # epp behind Envoy, sending requests to an engine they believe awake)
        if self.state(pool.deployment).epoch != marked.epoch or not dep.state.asleep:
            await self._skip(pool.deployment, "woken", "a request woke it before it slept",
                             seen.utilisation_pct)  # fmt: skip
            return
        code = ""
        if dep.state.in_flight or await self.probe.engine_busy(dep):
            code, text = "in_flight", "requests reached it before it slept"
        elif not dep.state.asleep:  # woken here while the engine was asked
            await self._skip(pool.deployment, "woken", "a request woke it before it slept",
                             seen.utilisation_pct)  # fmt: skip
            return
        else:
            level = dep.config.wake.sleep_level if dep.config.wake else 1
            if not await self.probe.sleep(dep, level):
                code, text = "sleep_failed", "the engine refused POST /sleep"
            elif not dep.state.asleep:  # a wake-up ran beside the call: it may sleep now
                dep.state.asleep = True  # the next request wakes it again, not trusts it
        if code:
            await self._write(pool.deployment, "awake", text)
            await self._skip(pool.deployment, code, text, seen.utilisation_pct)
            return
        await self._acted("sleep", pool.deployment, seen)

    # ------------------------------------------------------------------ wake-ups

    async def _woken(self, pool: str, how: str) -> None:
        """Publish ``pool`` awake (once for every replica): a request woke it here."""
        seen = self.state(pool)
        _, bodies = await self.pools_state.load()
        stored = PoolState.of(bodies.get(pool))
        if stored is not None and stored.epoch != seen.epoch:
            self.apply_pools(bodies)  # another replica moved it first
            return
        await self._write(pool, "awake", how)
        self.metrics.actions.labels(pool, "wake").inc()
        entry = self._log("wake", pool, how, asleep_s=round(self.clock() - seen.since, 3))
        log.info("reclaim: %s woken (%s)", pool, how)
        await self.audit("wake", pool, entry)

    async def watch_once(self) -> None:
        """Wake-ups seen here, the lease, and this replica's traffic for the others."""
        now = self.clock()
        if now - self._lease_at >= self.config.lease_s / 3:
            self._lease_at = now
            self.metrics.leader.set(1.0 if await self.lease.step() else 0.0)
        try:
            await self._follow_wakes()
            await self.publish_activity()
            if self.lease.leader:
                await self._prune(now)
        except Exception as exc:  # the database away: try again next tick, say so once a minute
            if now - self._warned_at >= 60.0:
                self._warned_at = now
                log.warning("reclaim: shared state not written (retrying): %s", exc)

    async def _prune(self, now: float) -> None:
        """Drop the traffic rows of replicas gone for longer than any window could look back
        (each start of a replica writes its own row; the acting replica clears the dead)."""
        keep_s = max(3600.0, 2 * self.usage.keep_s, 120.0 + 3 * self.config.activity_interval_s)
        gone = [
            name for name, body in self.traffic.remote.items()
            if float(body.get("at", 0.0)) < now - keep_s
        ][:10]  # fmt: skip
        for name in gone:
            await self.activity.delete(name)
            self.traffic.remote.pop(name, None)

    async def forget_self(self) -> None:
        """Remove this replica's traffic row (at shutdown; best effort)."""
        await self.activity.delete(self.owner)

    async def _follow_wakes(self) -> None:
        deps = self._deployments()
        table = self.tables.table
        for pool in self.config.pools:
            name, dep = pool.deployment, deps.get(pool.deployment)
            state = self.state(name)
            if dep is None or state.state == "awake":
                continue
            if state.state == "asleep" and not dep.state.asleep:
                await self._woken(name, "a request woke the engine (POST /wake_up)")
            elif state.state == "scaled_down":
                needed_by = [
                    a for a in table.aliases()
                    if any(d.id == name for r in table.chain(a) for d in r.deployments)
                ]  # fmt: skip
                if any(self.traffic.aliases.get(a, 0.0) > state.since for a in needed_by):
                    await self._woken(name, "a request for an alias it serves")

    # ------------------------------------------------------------------ the admin view

    def view(self) -> dict[str, Any]:
        now = self.clock()
        deps = self._deployments()
        pools = []
        for pool in self.config.pools:
            dep = deps.get(pool.deployment)
            state = self.state(pool.deployment)
            row: dict[str, Any] = {
                "pool": pool.deployment,
                "alias": dep.alias if dep else None,
                "action": pool.action,
                "below_util_pct": self.config.threshold(pool),
                "window_s": self.config.window(pool),
                "state": state.state,
                "since": state.since or None,
                "changed_by": state.by or None,
                "state_reason": state.reason or None,
            }
            if dep is not None:
                seen = self.assess(pool, dep, now)
                row.update(utilisation_pct=seen.utilisation_pct, observed_s=seen.observed_s,
                           candidate=seen.candidate, decision=seen.code,
                           decision_reason=seen.text)  # fmt: skip
            pools.append(row)
        return {
            "replica": self.owner,
            "acting": self.lease.leader,
            "pools": pools,
            "decisions": list(reversed(self.decisions)),
        }

    # ------------------------------------------------------------------ gauges

    def gauges(self) -> tuple[list[tuple[tuple[str, ...], float]], ...]:
        """(utilisation, observed, keep) samples for /metrics."""
        now = self.clock()
        deps = self._deployments()
        util: list[tuple[tuple[str, ...], float]] = []
        observed: list[tuple[tuple[str, ...], float]] = []
        keep: list[tuple[tuple[str, ...], float]] = []
        for pool in self.config.pools:
            name = pool.deployment
            mean, _ = self.usage.mean(name, now - self.config.window(pool))
            if mean is not None:
                util.append(((name,), mean))
            observed.append(((name,), min(self.config.window(pool), self.usage.span(name, now))))
            alias = deps[name].alias if name in deps else ""
            keep.append(((name, alias), 1.0 if self.state(name).state == "awake" else 0.0))
        return util, observed, keep
