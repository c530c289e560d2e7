"""`AlertNotifier`: what is queued when the gateway stops is still claimed; a notifier that never
started does not hold the shutdown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from fleetgate.app import MIGRATIONS
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.store import Database
from fleetgate.tenancy.alerts import AlertNotifier, BudgetAlert
from fleetgate.tenancy.tables import budget_alerts


def _alert(pct: int) -> BudgetAlert:
    return BudgetAlert("team", "t1", "team one", pct, pct / 100, 1.0, 1_800_000_000_000)


async def test_alerts_queued_at_close_are_claimed_once_and_a_second_close_is_a_no_op(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'fleetgate.db'}", migrations=MIGRATIONS)
    await db.migrate()
    notifier = AlertNotifier(db, None, http=OutboundHttp())
    try:
        await notifier.start()
        await notifier.start()  # once: a second start runs no second sender
        for pct in (50, 80, 100, 100):
            notifier.notify(_alert(pct))
        await notifier.aclose()  # waits for the queue, then stops
        assert [a.threshold_pct for a in notifier.sent] == [50, 80, 100]
        async with db.engine.connect() as conn:
            rows = (await conn.execute(sa.select(budget_alerts.c.threshold))).scalars().all()
        assert sorted(rows) == [50, 80, 100]
        await notifier.aclose()
    finally:
        await db.aclose()


async def test_a_notifier_never_started_closes_at_once_with_alerts_queued(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'fleetgate.db'}", migrations=MIGRATIONS)
    notifier = AlertNotifier(db, None, http=OutboundHttp())
    try:
        notifier.notify(_alert(50))  # the store never opened: nothing sends it
        async with asyncio.timeout(1.0):  # not the 2 s the drain of a running one may take
            await notifier.aclose()
        assert notifier.sent == []
    finally:
        await db.aclose()
