"""The one-time flash: kept in the session's row, sealed (a copy of the table shows no key),
taken once by the page that shows it, on any replica; and spend over time sums to the spend
report's totals, scoped to a team admin's own team."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from fleetgate.app import MIGRATIONS
from fleetgate.console.sessions import Sessions
from fleetgate.console.spend_series import spend_series
from fleetgate.console.tables import console_sessions
from fleetgate.contract.principal import Principal
from fleetgate.store import Database
from fleetgate.tenancy.reports import spend_report
from tests.console.support import MASTER, Console


@pytest.fixture
async def db(db_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    database = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await database.migrate()
    try:
        yield database
    finally:
        await database.aclose()


async def test_a_flash_is_sealed_and_taken_once_on_any_replica(db: Database) -> None:
    one, two = Sessions(db, 3600, 100), Sessions(db, 3600, 100)
    session = await one.open(Principal(key_id="master", role="master"), MASTER, "key", "m")
    assert (await one.get(session.id)).has_flash is False  # type: ignore[union-attr]
    await one.set_flash(session.id, {"message": "Key made.", "new_key": "sk-fg-secret123"})
    async with db.engine.connect() as conn:
        sealed = await conn.scalar(select(console_sessions.c.flash))
    assert sealed is not None and b"sk-fg-secret123" not in sealed
    assert (await two.get(session.id)).has_flash is True  # type: ignore[union-attr]
    taken = await asyncio.gather(two.take_flash(session.id), one.take_flash(session.id))
    assert sorted(taken, key=lambda t: t is None) == [
        {"message": "Key made.", "new_key": "sk-fg-secret123"},
        None,
    ]
    assert await one.take_flash(session.id) is None
    assert (await one.get(session.id)).has_flash is False  # type: ignore[union-attr]
    assert await one.take_flash("not-a-session") is None


async def test_spend_over_time_adds_up_to_the_report(console: Console) -> None:
    status, team = await console.admin("POST", "/admin/teams", json={"name": "search"})
    assert status == 201
    status, key = await console.admin("POST", "/admin/keys", json={"team": team["id"]})
    assert status == 201
    for k in (key["key"], key["key"], MASTER):
        assert await console.chat(k) == 200
    tenancy = console.feature.console.tenancy
    db = tenancy.db
    master = Principal(key_id="master", role="master")
    for _ in range(100):
        rows = await spend_report(db, master, ["team"], 0, None)
        if sum(r["requests"] for r in rows) == 3:
            break
        await asyncio.sleep(0.05)
    report = {r["team"] or "": r["spend_usd"] for r in rows}
    assert set(report) == {team["id"], ""}
    tomorrow = (int(time.time() * 1000) // 86_400_000 + 1) * 86_400_000
    for step in ("hour", "day"):
        series = await spend_series(db, master, "team", step, 0, tomorrow)
        drawn = {value: sum(line) for value, line in series.lines}
        assert drawn.keys() == report.keys()
        for value, usd in report.items():
            assert drawn[value] == pytest.approx(usd, rel=1e-9), step
        assert series.clipped  # since 1970 is more than 400 periods: the last 400 drawn
        assert len(series.starts) == 400 and series.starts[-1] < tomorrow
    # a team admin's chart holds its own team only
    admin = Principal(key_id="key_x", role="team_admin", team_id=team["id"])
    mine = await spend_series(db, admin, "alias", "day", tomorrow - 86_400_000, tomorrow)
    assert [v for v, _ in mine.lines] == ["tiny"]
    assert sum(mine.lines[0][1]) == pytest.approx(report[team["id"]], rel=1e-9)
