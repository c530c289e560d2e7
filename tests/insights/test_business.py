"""Business metrics on a synthetic month (10k users, 3 plans, churn and upgrades) equal the
generator's truth exactly: DAU, MAU, stickiness, day-1/7/30 retention, conversion, per-plan
users, requests, cost and revenue; written out of order in batches, and once more (no double
count). Read from closed days (`insights.day_rollup`) the report is the same: closed by two
replicas at once (each day stored once), and after a late row on a closed day (that day and
the later ones are computed until closed again, never counted twice)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from fleetgate.insights.business import BusinessQuery, business_report
from fleetgate.insights.day_rollup import close_days
from fleetgate.insights.tables import day_users, marks
from fleetgate.insights.writer import write_rows
from fleetgate.store.database import Database
from tests.insights.synthetic import PAID, REVENUE, Truth, synthetic_month
from tests.tenancy.support import migrated_database


async def _load(db: Database, rows: list[dict[str, object]]) -> int:
    new = 0
    for i in range(0, len(rows), 5000):
        async with db.engine.begin() as conn:
            new += await write_rows(db, conn, rows[i : i + 5000], PAID)
    return new


def _check(report: dict[str, object], truth: Truth) -> None:
    dau = {row["day"]: row["users"] for row in report["dau"]}  # type: ignore[attr-defined]
    from fleetgate.insights.business import iso_day

    assert dau == {iso_day(d): truth.dau.get(d, 0) for d in range(truth.start, truth.end + 1)}
    assert report["mau"] == truth.mau
    assert report["active_users"] == truth.active
    mean_dau = sum(truth.dau.get(d, 0) for d in range(truth.end - 29, truth.end + 1)) / 30
    assert report["stickiness"] == pytest.approx(mean_dau / truth.mau, rel=1e-12)
    retention = report["retention"]
    assert isinstance(retention, dict)
    for n in (1, 7, 30):
        expected = None if truth.start + n > truth.end else truth.retention(n)
        assert retention[f"d{n}"] == (pytest.approx(expected) if expected is not None else None)
    sizes = {c["day"]: c["users"] for c in retention["cohorts"]}
    assert sizes == {iso_day(d): n for d, n in truth.cohorts.items()}
    conversion = report["conversion"]
    assert conversion == {
        "converted": truth.converted, "unpaid_users": truth.unpaid,
        "rate": pytest.approx(truth.converted / truth.unpaid),
    }  # fmt: skip
    plans = report["plans"]
    assert isinstance(plans, dict)
    assert {p: v["active_users"] for p, v in plans.items()} == truth.plan_users
    assert {p: v["requests"] for p, v in plans.items()} == truth.plan_requests
    assert {p: v["cost_nusd"] for p, v in plans.items()} == truth.plan_cost
    days = truth.end - truth.start + 1
    assert plans["paid"]["revenue_usd"] == pytest.approx(truth.plan_users["paid"] * 20 * days / 30)
    assert plans["free"]["revenue_usd"] is None


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_synthetic_month_is_reported_as_its_truth(kind: str, tmp_path: Path) -> None:
    rows, truth = synthetic_month(users=10_000)  # #37's month: 10k users (~98k rows)
    assert truth.converted > 100 and truth.retention(7) > 0  # the month has what is tested
    async with migrated_database(kind, tmp_path) as db:
        assert await _load(db, rows) == len(rows)
        assert await _load(db, rows[:7000]) == 0  # written again: nothing counts twice
        async with db.engine.connect() as conn:
            report = await business_report(
                conn, BusinessQuery(truth.start, truth.end), paid=PAID, revenue_usd_month=REVENUE
            )
    _check(report, truth)
    total = report["totals"]
    assert isinstance(total, dict) and total["requests"] == len(rows)


async def test_a_team_and_a_shorter_range_are_cut_exactly(tmp_path: Path) -> None:
    rows, truth = synthetic_month(users=900, teams=3, seed=11)
    async with migrated_database("sqlite", tmp_path) as db:
        await _load(db, rows)
        start, end = truth.start + 10, truth.start + 19
        async with db.engine.connect() as conn:
            report = await business_report(
                conn, BusinessQuery(start, end, "team-1"), paid=PAID, revenue_usd_month={}
            )
    mine = [r for r in rows if r["team_id"] == "team-1" and start <= r["day"] <= end]
    users = {r["end_user"] for r in mine}
    assert report["active_users"] == len(users)
    assert report["totals"]["requests"] == len(mine)
    by_day: dict[int, set[object]] = {}
    for r in mine:
        by_day.setdefault(r["day"], set()).add(r["end_user"])
    got = [row["users"] for row in report["dau"]]
    assert got == [len(by_day.get(d, ())) for d in range(start, end + 1)]
    assert report["revenue_usd"] is None and report["cost_per_revenue"] is None


async def _report(db: Database, q: BusinessQuery) -> dict[str, Any]:
    async with db.engine.connect() as conn:
        return await business_report(conn, q, paid=PAID, revenue_usd_month=REVENUE)


async def _computed_now(db: Database, q: BusinessQuery) -> dict[str, Any]:
    """The report with every day computed from the user-day rows (the closed ones ignored)."""
    async with db.engine.begin() as conn:
        held = (await conn.execute(select(marks.c.kind, marks.c.unit, marks.c.closed))).all()
        await conn.execute(update(marks).values(closed=None))
    report = await _report(db, q)
    async with db.engine.begin() as conn:
        for kind, unit, closed in held:
            await conn.execute(update(marks).where(marks.c.kind == kind, marks.c.unit == unit)
                               .values(closed=closed))  # fmt: skip
    return report


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_closed_days_report_the_truth_and_a_late_row_counts_once(
    kind: str, tmp_path: Path
) -> None:
    rows, truth = synthetic_month(users=1500, seed=5)  # 3,000 before: 54 s of a CI run
    async with migrated_database(kind, tmp_path) as db:
        await _load(db, rows)
        q = BusinessQuery(truth.start, truth.end)
        computed = await _report(db, q)  # nothing closed yet
        _check(computed, truth)
        # two replicas close the month's finished days at once: each day is stored once
        stored = await asyncio.gather(close_days(db, truth.end - 1), close_days(db, truth.end - 1))
        assert sum(stored) == truth.end - truth.start
        async with db.engine.connect() as conn:
            days = await conn.scalar(select(func.count(func.distinct(day_users.c.day))))
        assert days == truth.end - truth.start
        closed = await _report(db, q)
        assert closed == computed
        assert await close_days(db, truth.end - 1) == 0  # all current: nothing stored again

        # a late row on the third day from a user first seen later: its first day, cohorts,
        # retention and the later days' previous days change
        user = next(r for r in rows if r["day"] > truth.start + 5)
        late = {**user, "request_id": "late-1", "day": truth.start + 2,
                "created_ms": (truth.start + 2) * 86_400_000 + 1}  # fmt: skip
        async with db.engine.begin() as conn:
            assert await write_rows(db, conn, [late], PAID) == 1
        after = await _report(db, q)
        assert after == await _computed_now(db, q)
        assert after["dau"][2]["users"] == computed["dau"][2]["users"] + 1
        assert after["totals"]["requests"] == computed["totals"]["requests"] + 1
        assert await close_days(db, truth.end - 1) == truth.end - truth.start - 2
        assert await _report(db, q) == after
