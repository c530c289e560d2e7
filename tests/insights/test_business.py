"""Business metrics on a synthetic month (10k users, 3 plans, churn and upgrades) equal the
generator's truth exactly: DAU, MAU, stickiness, day-1/7/30 retention, conversion, per-plan
users, requests, cost and revenue; written out of order in batches, and once more (no double
count)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.insights.business import BusinessQuery, business_report
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
    rows, truth = synthetic_month(users=10_000)
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
