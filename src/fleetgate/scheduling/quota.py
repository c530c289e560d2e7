"""Quotas of one pool: an org -> team hierarchy with nominal quotas, borrowing and lending
limits (Kueue's semantics), on requests in flight and on tokens per second.

A *node* is a team or an org with a `Quotas` entry (`scheduling.teams.<t>.quota`,
`scheduling.orgs.<o>.quota`); a team's *chain* is its own node and its org's. A team with no
node at all has a nominal of 0: everything it uses is borrowed. For a new request of a team,
`QuotaTree.status` says:

- `UNDER`: every quota of its chain is below its nominal (the request is the owner's own
  share: it goes before borrowers of its band, and an engine with priority runs it first);
- `BORROWING`: some quota is at or over nominal (it uses what others leave idle);
- `CAPPED`: some quota would pass nominal + ``borrowing_limit``: it may not start now.

Lending: a concurrency quota with ``lending_limit`` keeps ``nominal - lending_limit`` slots
reserved for its node while it is idle; `QuotaTree.reserved_for` is what the other teams must
leave free. The tokens-per-second usage is a decayed sum (time constant ``rate_window_s``) of
the tokens charged: prompt tokens at admission, output tokens as the stream goes.

Example::

    tree = QuotaTree(config, clock=time.monotonic)
    tree.status("team-a")          # UNDER
    tree.take("team-a"); tree.charge("team-a", 500)
    tree.reserved_for("team-b")    # slots team-b must leave free for others' guarantees
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fleetgate.scheduling.config import Quotas, SchedulingConfig

__all__ = ["BORROWING", "CAPPED", "UNDER", "QuotaNode", "QuotaTree"]

UNDER, BORROWING, CAPPED = 0, 1, 2


class QuotaNode:
    """One team or org of a pool: its quotas and its usage."""

    __slots__ = ("_at", "_sum", "elsewhere", "elsewhere_rate", "in_flight", "name", "quotas")

    def __init__(self, name: str, quotas: Quotas | None) -> None:
        self.name = name
        self.quotas = quotas
        self.in_flight = 0  # in this process
        # The other gateway processes' requests in flight and tokens/s (a fleet's shared
        # state sets them at each sync; 0 alone).
        self.elsewhere = 0
        self.elsewhere_rate = 0.0
        self._sum = 0.0  # decayed tokens
        self._at = 0.0

    def rate(self, now: float, window: float) -> float:
        """Tokens per second over about the last ``window`` seconds (the fleet's)."""
        return self.own_rate(now, window) + self.elsewhere_rate

    def own_rate(self, now: float, window: float) -> float:
        """This process's share of `rate`."""
        if self._sum <= 0:
            return 0.0
        return self._sum * math.exp(-(now - self._at) / window) / window

    def add(self, tokens: float, now: float, window: float) -> None:
        self._sum = self._sum * math.exp(-(now - self._at) / window) + tokens
        self._at = now

    def reserved_unused(self) -> int:
        """Slots reserved for this node (its nominal not lendable) it is not using."""
        quotas = self.quotas
        c = quotas.concurrency if quotas is not None else None
        if c is None or c.lending_limit is None:
            return 0
        return max(0, c.nominal - c.lending_limit - self.in_flight - self.elsewhere)


class QuotaTree:
    """The quota nodes of one pool (one event loop: no locks)."""

    __slots__ = (
        "_chains",
        "_clock",
        "_groups",
        "_team_group",
        "nodes",
        "rates",
        "waiting_elsewhere",
        "window",
    )

    def __init__(self, config: SchedulingConfig, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.window = config.rate_window_s
        self.nodes: dict[str, QuotaNode] = {}
        orgs = {name: QuotaNode(f"org:{name}", o.quota) for name, o in config.orgs.items()}
        self.nodes.update({n.name: n for n in orgs.values()})
        self._chains: dict[str, tuple[QuotaNode, ...]] = {}
        # Lending: per group (an org with its teams, or a team without an org), what it holds.
        self._groups: dict[str, tuple[QuotaNode | None, list[QuotaNode]]] = {
            f"org:{name}": (node, []) for name, node in orgs.items()
        }
        self._team_group: dict[str, str] = {}
        for team, policy in config.teams.items():
            if policy.quota is None and policy.org is None:
                continue
            node = QuotaNode(f"team:{team}", policy.quota)
            self.nodes[node.name] = node
            if policy.org is not None:
                org = orgs[policy.org]
                self._chains[team] = (node, org)
                group = f"org:{policy.org}"
            else:
                self._chains[team] = (node,)
                group = node.name
                self._groups[group] = (None, [])
            self._groups[group][1].append(node)
            self._team_group[team] = group
        # Only groups that reserve anything are looked at by `reserved_for`.
        self._groups = {
            g: (org, teams)
            for g, (org, teams) in self._groups.items()
            if any(_reserves(n) for n in (org, *teams) if n is not None)
        }
        self.rates = any(
            n.quotas is not None and n.quotas.tokens_per_s for n in self.nodes.values()
        )
        # A fleet's: requests queued in other processes per team (`owed_elsewhere`).
        self.waiting_elsewhere: dict[str, int] = {}

    def chain(self, team: str) -> tuple[QuotaNode, ...]:
        return self._chains.get(team, ())

    # ------------------------------------------------------------------ usage

    def take(self, team: str) -> None:
        for node in self._chains.get(team, ()):
            node.in_flight += 1

    def give_back(self, team: str) -> None:
        for node in self._chains.get(team, ()):
            node.in_flight -= 1

    def charge(self, team: str, tokens: float) -> None:
        if tokens > 0 and self.rates:
            now = self._clock()
            for node in self._chains.get(team, ()):
                node.add(tokens, now, self.window)

    # ------------------------------------------------------------------ judging

    def status(self, team: str, extra: int = 1) -> int:
        """`UNDER`, `BORROWING` or `CAPPED` for ``team`` with ``extra`` more requests in
        flight (1: a new request; 0: what it runs now)."""
        owned = over = False
        now: float | None = None
        for node in self._chains.get(team, ()):
            quotas = node.quotas
            if quotas is None:
                continue
            owned = True  # some quota applies: the team owns a share
            c = quotas.concurrency
            if c is not None:
                used = node.in_flight + node.elsewhere + extra
                if extra and c.borrowing_limit is not None and used > c.nominal + c.borrowing_limit:
                    return CAPPED
                over = over or used > c.nominal
            r = quotas.tokens_per_s
            if r is not None:
                now = self._clock() if now is None else now
                rate = node.rate(now, self.window)
                if (
                    extra
                    and r.borrowing_limit is not None
                    and rate >= r.nominal + r.borrowing_limit
                ):
                    return CAPPED
                over = over or (rate >= r.nominal if extra else rate > r.nominal)
        return BORROWING if over or not owned else UNDER

    def unused_nominal(self, team: str) -> int:
        """Requests ``team`` may still start within every concurrency nominal of its chain
        (the fleet's counts); 0 when no concurrency quota applies to it."""
        unused: int | None = None
        for node in self._chains.get(team, ()):
            c = node.quotas.concurrency if node.quotas is not None else None
            if c is not None:
                left = max(0, c.nominal - node.in_flight - node.elsewhere)
                unused = left if unused is None else min(unused, left)
        return unused or 0

    def owed_elsewhere(self, team: str) -> int:
        """Slots owed to the other teams' requests queued in other processes within their
        nominal (a fleet: an owner waiting anywhere reclaims its share before a borrower
        here takes a freed slot)."""
        owed = 0
        for other, count in self.waiting_elsewhere.items():
            if other != team:
                owed += min(count, self.unused_nominal(other))
        return owed

    def reserved_for(self, team: str) -> int:
        """Slots reserved for other nodes' unlent nominal that ``team`` must leave free
        (and, in a fleet, for the other teams' owners queued in other processes)."""
        if self.waiting_elsewhere:
            return self._reserved(team) + self.owed_elsewhere(team)
        return self._reserved(team)

    def _reserved(self, team: str) -> int:
        if not self._groups:
            return 0
        own_group = self._team_group.get(team)
        own = self._chains.get(team, (None,))[0]
        total = 0
        for name, (org, teams) in self._groups.items():
            if name == own_group:
                total += sum(t.reserved_unused() for t in teams if t is not own)
            else:
                held = sum(t.reserved_unused() for t in teams)
                total += max(org.reserved_unused() if org is not None else 0, held)
        return total

    def usage(self) -> dict[str, dict[str, float]]:
        """Every node's requests in flight and token rate (for /admin/queues; a fleet's)."""
        now = self._clock()
        return {
            name: {
                "in_flight": n.in_flight + n.elsewhere,
                "tokens_per_s": round(n.rate(now, self.window), 3),
            }
            for name, n in sorted(self.nodes.items())
        }

    # ------------------------------------------------------------------ a fleet

    def own_rates(self) -> dict[str, float]:
        """This process's tokens/s per node with a rate quota (what it tells the others)."""
        if not self.rates:
            return {}
        now = self._clock()
        return {name: n.own_rate(now, self.window) for name, n in self.nodes.items()}

    def set_elsewhere(
        self,
        teams: dict[str, int],
        rates: dict[str, float],
        waiting: dict[str, int] | None = None,
    ) -> None:
        """The other processes' requests in flight per team and tokens/s per node, and
        their queued requests per team with a quota (``waiting``)."""
        self.waiting_elsewhere = {t: n for t, n in (waiting or {}).items() if t in self._chains}
        for node in self.nodes.values():
            node.elsewhere = 0
            node.elsewhere_rate = rates.get(node.name, 0.0)
        for team, count in teams.items():
            for node in self._chains.get(team, ()):
                node.elsewhere += count


def _reserves(node: QuotaNode) -> bool:
    c = node.quotas.concurrency if node.quotas is not None else None
    return c is not None and c.lending_limit is not None and c.lending_limit < c.nominal
