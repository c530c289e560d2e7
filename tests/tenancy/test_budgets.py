"""`Budgets`: what it remembers per budgeted scope is bounded by the scopes budgeted now, not by
every scope and period seen since the process started."""

from __future__ import annotations

from pathlib import Path

from fleetgate.app import MIGRATIONS
from fleetgate.limits import MemoryLimiter
from fleetgate.store import Database
from fleetgate.tenancy.budgets import Budgets
from fleetgate.tenancy.cache import KeyCache, Snapshot
from fleetgate.tenancy.model import Limits, TeamEntry


async def test_ended_periods_and_unbudgeted_scopes_are_forgotten(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'fleetgate.db'}", migrations=MIGRATIONS)
    await db.migrate()
    cache = KeyCache(db)
    teams = {f"t{i}": TeamEntry(f"t{i}", f"team {i}", Limits(budget_nusd=10**9,
                                                             budget_period="daily"))
             for i in range(3)}  # fmt: skip
    cache.snapshot = Snapshot(version=1, teams=teams)
    budgets = Budgets(db, MemoryLimiter(), cache)
    try:
        await budgets.seed()
        now_keys = set(budgets._spent)
        assert len(now_keys) == 3 and budgets._seeded == now_keys
        # yesterday's counters (as a long uptime leaves them) and a team no longer budgeted
        budgets._spent["team:t0:0"] = 5
        budgets._seeded.add("team:t0:0")
        cache.snapshot = Snapshot(version=2, teams={k: teams[k] for k in ("t0", "t1")})
        budgets._forget_ended()
        assert (
            set(budgets._spent)
            == budgets._seeded
            == now_keys - {k for k in now_keys if k.startswith("team:t2:")}
        )
    finally:
        await db.aclose()
