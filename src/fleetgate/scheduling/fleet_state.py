"""`FleetState`: a pool's admission state shared by every gateway process through Redis.

The request path never waits on Redis. Each process holds a *lease*: slots of the pool it
may fill (`Pool.room` admits only while this process's own requests in flight are below it).
The leases add up to at most the pool's limit (the Lua step of `fleet_script` grants them),
so the engines never hold more than the limit, whichever process admits. A process leases
what it runs plus ``lease_slice`` spare slots (its fast path) and returns the rest at its next
sync; one with a queue asks for more at once (`wants_room`), and while the wants add up past
the limit each process gets at most the max-min fair share of them (its running requests are
never taken back: a process over its share shrinks as they end).

Everything else admission decides by is the fleet's as last synced plus this process's own
since: requests in flight per team (guarantees, quota status, lending), the quota nodes'
tokens/s, the fair-share counters (their deltas are added in Redis; each process reads the
totals back) and the requests queued in other processes (batch idleness). `fleet.Fleet` does
the syncing; this class is the synchronous view and the bookkeeping of one sync.

Example::

    state = FleetState("proc-1", config.fleet, time.monotonic, "fail_closed")
    state.configure(config)
    state.take("team-a")                       # counted here at once, in Redis at the next sync
    call = state.prepare(limit=16, queued=0)   # the arguments of one sync
    state.apply(reply, call)                   # its answer: the lease and the fleet's counts

Why one module: `FleetState` is one set of counters (the lease, ``own`` and ``admitted``, the
per-team counts here and elsewhere, the fair level, the peers) written by two halves that must
agree: the fast path (`take`, `give_back`, `guarantees`, `ask_elsewhere`) and the sync's
bookkeeping (`prepare`, `status`, `apply`, `unreachable`). Their invariants span both halves
(``hold`` never above the lease nor below what runs, a slot over the fair share given back in
`give_back` that `prepare` then does not ask for), and the status JSON that `status` writes is
the one `Peer.parse` reads. Split in two, neither half could be checked without reading the
other.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fleetgate.scheduling.config import BANDS, FleetConfig, SchedulingConfig
from fleetgate.scheduling.quota import BORROWING, QuotaTree
from fleetgate.scheduling.state import QuotaLedger, add_one, drop_one, quota_tree_holding
from fleetgate.scheduling.vtc import VirtualTokenCounters

__all__ = ["FleetFairShare", "FleetState", "Peer", "SyncCall"]

FailPolicy = Literal["fail_open", "fail_closed"]
# A stream another process was asked to cancel counts as on its way this long (no second
# order for the same need meanwhile; as `preempt.CANCEL_GRACE_S` for a local cancellation).
ORDER_GRACE_S = 1.0
MAX_ORDER = 64  # streams one order may ask a process to cancel
DECISIONS_OUTBOX = 256  # decisions of one pool waiting for the next sync, at most


class FleetFairShare(VirtualTokenCounters):
    """Virtual token counters whose charges (and lifts) are also kept as deltas for Redis;
    `settle` replaces the view by the fleet's totals."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[str, float] = {}

    def charge(self, team: str, tokens: float, weight: float = 1.0) -> None:
        if tokens > 0:
            delta = tokens / weight
            self.counters[team] = self.counters.get(team, 0.0) + delta
            self.pending[team] = self.pending.get(team, 0.0) + delta

    def activate(self, team: str, backlogged: Iterable[str]) -> None:
        before = self.value(team)
        super().activate(team, backlogged)
        lift = self.value(team) - before
        if lift > 0:
            self.pending[team] = self.pending.get(team, 0.0) + lift

    def take_pending(self) -> list[tuple[str, float]]:
        """Every team of the view with its delta since the last sync (0: only read back)."""
        pending, self.pending = self.pending, {}
        teams = set(self.counters) | set(pending)
        return [(t, pending.get(t, 0.0)) for t in sorted(teams)]

    def settle(self, totals: Mapping[str, float]) -> None:
        """The fleet's totals for the teams sent, plus what was charged since."""
        for team, total in totals.items():
            self.counters[team] = total + self.pending.get(team, 0.0)


@dataclass(frozen=True, slots=True)
class Peer:
    """Another process of the pool, as it last published itself."""

    in_flight: int
    lease: int | None  # as Redis held it at this process's sync (None: unbounded)
    teams: dict[str, int]
    queued: tuple[int, ...]  # per band
    # (band rank, team, how many) of its cancellable streams
    victims: tuple[tuple[int, str, int], ...]
    rates: dict[str, float]  # tokens/s per quota node
    waiting: dict[str, int]  # requests queued per team with a quota
    critical_age: float | None  # seconds since a critical request last arrived there
    # (seconds to its end, seconds per chunk) of its streams about to end (`pool.time_to_end`)
    # as of ``at`` (its wall clock when it published them)
    ends: tuple[tuple[float, float], ...] = ()
    at: float | None = None

    @classmethod
    def parse(cls, raw: Any, lease: int | None) -> Peer | None:
        try:
            data = json.loads(raw)
            return cls(
                int(data["n"]),
                lease,
                {str(k): int(v) for k, v in data["t"].items()},
                tuple(int(q) for q in data["q"]),
                tuple(_victim(v) for v in data["v"]),
                {str(k): float(v) for k, v in data["r"].items()},
                {str(k): int(v) for k, v in data.get("w", {}).items()},
                None if data.get("c") is None else float(data["c"]),
                tuple((float(e), float(step)) for e, step in data.get("e", ())),
                None if data.get("at") is None else float(data["at"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


@dataclass(frozen=True, slots=True)
class SyncCall:
    """What one sync sends for a pool (`FleetState.prepare`)."""

    limit: int | None
    want: int
    hold: int
    counters: list[tuple[str, float]]
    order: tuple[str, str] | None  # (target process, order JSON)
    sent_at: float


class FleetState:
    """`AdmissionState` of one pool shared through Redis (see the module doc)."""

    def __init__(
        self,
        process: str,
        config: FleetConfig,
        clock: Callable[[], float],
        failure: FailPolicy,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: this process's (monotonic); ``wall``: the clock processes share (the
        age of what another process published)."""
        self.process = process
        self.config = config
        self._clock = clock
        self.failure: FailPolicy = failure
        self.admitted = 0  # the fleet's (as last synced, plus this process's since)
        self.own = 0
        self.own_teams: dict[str, int] = {}
        self.teams: dict[str, int] = {}  # the fleet's per team
        self.elsewhere = 0
        self.elsewhere_teams: dict[str, int] = {}
        self.queued_elsewhere = 0
        # When (this process's clock) a critical request last arrived at another process of
        # the pool, as last synced (`critical_reserve_hold_s` holds the reserve fleet-wide).
        self.critical_elsewhere: float | None = None
        # When (this clock) the streams other processes published as about to end are
        # foreseen to end, each with its seconds per chunk (`foreseen_end`).
        self._ends: list[tuple[float, float]] = []
        self._wall = wall
        self.lease: int | None = 0  # nothing leased before the first sync
        self.fair = -1  # the fair level at the last sync (-1: no contention)
        self.vtc = FleetFairShare()
        self._tree: QuotaTree | None = None
        self.quotas: QuotaLedger | None = None  # the tree, read by admission
        self.peers: dict[str, Peer] = {}
        self.synced_at: float | None = None  # when the last successful sync was sent
        self.reachable = True
        self.failed_syncs = 0
        self.wake: Callable[[], None] = lambda: None  # the fleet's sync, now
        self._order: tuple[str, str] | None = None
        self._ordered: list[tuple[float, str, int]] = []  # (when, process, streams) sent
        # Scheduling decisions for the fleet's shared log, written at the next sync (the
        # oldest dropped past `DECISIONS_OUTBOX` while Redis is slow or away).
        self.decisions: deque[str] = deque(maxlen=DECISIONS_OUTBOX)

    # ------------------------------------------------------------------ the fast path

    def take(self, team: str) -> None:
        self.admitted += 1
        self.own += 1
        add_one(self.own_teams, team)
        add_one(self.teams, team)
        if self.quotas is not None:
            self.quotas.take(team)

    def give_back(self, team: str) -> None:
        self.admitted -= 1
        self.own -= 1
        lease, fair = self.lease, self.fair
        if fair >= 0 and lease is not None and lease > self.own and lease > fair:
            self.lease = lease - 1  # over its fair share: the slot goes back at the next sync
        if self.quotas is not None:
            self.quotas.give_back(team)
        for counts in (self.own_teams, self.teams):
            drop_one(counts, team)

    def configure(self, config: SchedulingConfig) -> None:
        quotas = quota_tree_holding(config, self._clock, self.own_teams)
        if quotas is not None:
            quotas.set_elsewhere(self.elsewhere_teams, {})
        self._tree = self.quotas = quotas

    def guarantees(self, team: str, guaranteed: int) -> bool:
        if self.synced_at is None or self.teams.get(team, 0) >= guaranteed:
            return False  # (before its first sync a process does not know its share)
        share = -(-guaranteed // (1 + len(self.peers)))  # ceil: the live processes' share
        return self.own_teams.get(team, 0) < share

    def wants_room(self, limit: int | None) -> None:
        lease = self.lease
        if lease is not None and (limit is None or lease < limit):
            self.wake()

    def ask_elsewhere(self, rank: int, team: str, owner: bool, count: int = 1) -> bool:
        """Ask the process serving the streams a request of ``team`` (band ``rank``) may
        cancel to cancel up to ``count`` of them, less those asked for within the last
        `ORDER_GRACE_S` (on their way); one order per sync. True: some are on their way."""
        now = self._clock()
        ordered = [o for o in self._ordered if now - o[0] < ORDER_GRACE_S]
        if self._order is not None and ordered:  # not sent yet: made again with ``count``
            self._order = None
            ordered.pop()
        self._ordered = ordered
        sent: dict[str, int] = {}
        for _, process, n in ordered:
            sent[process] = sent.get(process, 0) + n
        missing = min(count, MAX_ORDER) - sum(sent.values())
        if missing <= 0:
            return bool(ordered)
        found = self._victim_process(rank, team, owner, sent)
        if found is None:
            return bool(ordered)
        target, available = found
        n = min(missing, available)
        order = {"rank": rank, "band": BANDS[rank], "team": team, "owner": owner, "n": n}
        self._order = (target, json.dumps(order))
        ordered.append((now, target, n))
        self.wake()
        return True

    def _victim_process(
        self, rank: int, team: str, owner: bool, sent: Mapping[str, int]
    ) -> tuple[str, int] | None:
        """The process serving the streams a starved request or a claim would cancel (the
        lowest band; among equals, the most of them not yet asked for), and how many."""
        quotas = self.quotas
        best: tuple[int, int, str] | None = None
        for process, peer in sorted(self.peers.items()):
            lowest, found = -1, 0
            for v_rank, v_team, count in peer.victims:
                eligible = v_rank > rank or (
                    owner
                    and quotas is not None
                    and v_rank >= rank
                    and v_team != team
                    and quotas.status(v_team, 0) == BORROWING
                )
                if eligible:
                    lowest = max(lowest, v_rank)
                    found += count
            found -= sent.get(process, 0)
            if found > 0 and (best is None or (lowest, found) > best[:2]):
                best = (lowest, found, process)
        return None if best is None else (best[2], best[1])

    def foreseen_end(self) -> float | None:
        if not self.config.foreseen_ends:
            return None
        now = self._clock()
        due = [end + 1.5 * step for end, step in self._ends if now < end <= now + step]
        return min(due) if due else None

    def decided(self, decision: dict[str, Any]) -> None:
        """A scheduling decision of this process, for the fleet's shared log."""
        self.decisions.append(json.dumps(decision, separators=(",", ":")))

    def describe(self) -> dict[str, object] | None:
        now = self._clock()
        return {
            "process": self.process,
            "lease": self.lease,
            "in_flight_here": self.own,
            "redis": "ok" if self.reachable else "unreachable",
            "on_redis_failure": self.failure,
            "synced_s_ago": None if self.synced_at is None else round(now - self.synced_at, 4),
            "processes": {
                p: {"in_flight": peer.in_flight, "lease": peer.lease, "queued": sum(peer.queued)}
                for p, peer in sorted(self.peers.items())
            },
        }

    # ------------------------------------------------------------------ one sync

    def prepare(self, limit: int | None, queued: int) -> SyncCall:
        """The arguments of one sync; until its answer the lease is what it holds (``hold``:
        never more than the lease, never less than what runs, and at contention no more)."""
        own = self.own
        # Spare slots for the fast path only while the pool is not contended; at contention
        # a process wants what runs and what queues, and a request that finds no room queues
        # and is granted at the next sync (at once: `wants_room`).
        spare = 0 if self.fair >= 0 else self.config.lease_slice
        want = own + max(spare, queued)
        if limit is not None:
            want = min(want, max(limit, 0))
        current = self.lease if self.lease is not None else own
        # At contention nothing starts on the fast path while the call is out (what queues
        # starts at its answer), so the slots it holds beyond what runs can go to the others.
        hold = max(0, min(current, own if self.fair >= 0 else max(own, want)))
        if limit is not None and self.lease is not None:
            self.lease = hold
        order, self._order = self._order, None
        return SyncCall(limit, want, hold, self.vtc.take_pending(), order, self._clock())

    def startable(self, queued: Mapping[str, int]) -> int:
        """Of the requests queued here (per team), those this process could start with more
        lease: not those of a team over its nominal while another team's owners wait in
        other processes (the slots go to them first: `QuotaTree.owed_elsewhere`). A process
        asks for no lease it could not use, so the fair shares go where owners wait."""
        tree = self._tree
        if tree is None or not tree.waiting_elsewhere:
            return sum(queued.values())
        return sum(
            n
            for team, n in queued.items()
            if tree.unused_nominal(team) > 0 or not tree.owed_elsewhere(team)
        )

    def status(
        self,
        queued: Iterable[int],
        victims: Iterable[tuple[int, str]],
        waiting: Mapping[str, int] | None = None,
        critical_seen: float | None = None,
        ends: Iterable[tuple[float, float]] = (),
    ) -> str:
        """This process's status for the others (JSON); ``waiting``: queued per team;
        ``critical_seen``: when a critical request last arrived here (this clock); ``ends``:
        its streams about to end (`pool.time_to_end`), stamped with the shared wall clock."""
        tree = self._tree
        rates = tree.own_rates() if tree is not None else {}
        owners = (
            {t: n for t, n in waiting.items() if tree.chain(t)}
            if tree is not None and waiting
            else {}
        )
        return json.dumps(
            {
                "n": self.own,
                "t": self.own_teams,
                "q": list(queued),
                "v": [[r, t, n] for (r, t), n in sorted(Counter(victims).items())],
                "r": {k: round(v, 3) for k, v in rates.items() if v > 0},
                "w": owners,
                "c": None if critical_seen is None else round(self._clock() - critical_seen, 3),
                "e": [[round(e, 4), round(step, 4)] for e, step in ends],
                "at": round(self._wall(), 4),
            },
            separators=(",", ":"),
        )

    def apply(self, reply: Any, call: SyncCall) -> list[dict[str, Any]]:
        """The answer of a sync: the lease, the fleet's counts; returns the orders for this
        process (streams to cancel for another process's starved request)."""
        grant, fair, statuses, counted, orders, leases = reply
        held = {
            _text(leases[i]): int(_text(leases[i + 1]).partition(",")[0])
            for i in range(0, len(leases) - 1, 2)
        }
        self.fair = fair = int(fair)
        if call.limit is None:
            self.lease = None
        else:  # over its fair share it fills no more than it runs (Redis's lease may be more)
            self.lease = int(grant) if fair < 0 else min(int(grant), max(self.own, fair))
        peers: dict[str, Peer] = {}
        for i in range(0, len(statuses) - 1, 2):
            process = _text(statuses[i])
            peer = Peer.parse(statuses[i + 1], held.get(process))
            if peer is not None:
                peers[process] = peer
        self._set_peers(peers)
        totals = {
            team: float(_text(value))
            for (team, _), value in zip(call.counters, counted, strict=False)
            if value is not None
        }
        self.vtc.settle(totals)
        self.synced_at = call.sent_at
        self.reachable = True
        found: list[dict[str, Any]] = []
        for raw in orders:
            try:
                order = json.loads(raw)
            except ValueError:
                continue
            if isinstance(order, dict):
                found.append(order)
        return found

    def unreachable(self, call: SyncCall) -> None:
        """A sync failed. Within the lease's TTL of the last good one the lease held stays;
        past it the policy applies: ``fail_open`` admits on this process's view alone (the
        others' counts forgotten), ``fail_closed`` admits nothing new (lease 0)."""
        self.reachable = False
        self.failed_syncs += 1
        if call.order is not None and self._order is None:
            self._order = call.order  # sent again once Redis answers
        last = self.synced_at
        if last is not None and call.sent_at - last < self.config.lease_ttl_s:
            return
        if self.failure == "fail_open":
            self.lease = None
            self.fair = -1
            self._set_peers({})
        elif call.limit is not None:
            self.lease = 0

    def _set_peers(self, peers: dict[str, Peer]) -> None:
        self.peers = peers
        now, wall = self._clock(), self._wall()
        self._ends = [
            (now + e - max(0.0, wall - peer.at), step)
            for peer in peers.values()
            if peer.at is not None
            for e, step in peer.ends
        ]
        elsewhere: dict[str, int] = {}
        rates: dict[str, float] = {}
        waiting: dict[str, int] = {}
        for peer in peers.values():
            for team, count in peer.teams.items():
                elsewhere[team] = elsewhere.get(team, 0) + count
            for team, count in peer.waiting.items():
                waiting[team] = waiting.get(team, 0) + count
            for node, rate in peer.rates.items():
                rates[node] = rates.get(node, 0.0) + rate
        self.elsewhere_teams = elsewhere
        self.elsewhere = sum(peer.in_flight for peer in peers.values())
        self.queued_elsewhere = sum(sum(peer.queued) for peer in peers.values())
        ages = [p.critical_age for p in peers.values() if p.critical_age is not None]
        self.critical_elsewhere = self._clock() - min(ages) if ages else None
        self.admitted = self.own + self.elsewhere
        teams = dict(elsewhere)
        for team, count in self.own_teams.items():
            teams[team] = teams.get(team, 0) + count
        self.teams = teams
        if self._tree is not None:
            self._tree.set_elsewhere(elsewhere, rates, waiting)


def _victim(raw: Any) -> tuple[int, str, int]:
    """One ``[rank, team, count]`` of a status (``[rank, team]``: one stream)."""
    rank, team, *count = raw
    return int(rank), str(team), int(count[0]) if count else 1


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
