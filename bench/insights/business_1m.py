"""The business report at the console's scale: a synthetic month of about 1M requests (10k users,
3 plans, 6-34 requests per active day) written through the insights writer's path, then the
report (DAU, MAU, stickiness, retention, plans, conversion) timed against a baseline measured
in the same run: DAU and MAU alone counted from the raw request rows (what a report without the
rollups would have to do). Medians of five; also checks the report's MAU against the truth.

    PYTHONPATH=src .venv/bin/python bench/insights/business_1m.py [--backend postgres|sqlite]
        [--users 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from sqlalchemy import text  # noqa: E402
from tests.insights.synthetic import PAID, REVENUE, synthetic_month  # noqa: E402
from tests.tenancy.support import create_pg_database, drop_pg_database  # noqa: E402

from fleetgate.app import MIGRATIONS  # noqa: E402
from fleetgate.insights.business import BusinessQuery, business_report  # noqa: E402
from fleetgate.insights.writer import write_rows  # noqa: E402
from fleetgate.store import Database  # noqa: E402

_RAW = (
    "SELECT day, COUNT(*) FROM (SELECT DISTINCT day, team_id, end_user FROM fg_insight_requests "
    "WHERE day BETWEEN :a AND :b) s GROUP BY day",
    "SELECT COUNT(*) FROM (SELECT DISTINCT team_id, end_user FROM fg_insight_requests "
    "WHERE day BETWEEN :a AND :b) s",
)


async def run(backend: str, users: int, runs: int) -> None:
    rows, truth = synthetic_month(users=users, per_day=(6, 34))
    print(f"{len(rows):,} requests, {truth.active:,} users, backend {backend}")
    url = await create_pg_database() if backend == "postgres" else None
    with tempfile.TemporaryDirectory() as tmp:
        db = Database.from_url(url, Path(tmp), migrations=MIGRATIONS)
        try:
            await db.migrate()
            started = time.perf_counter()
            for i in range(0, len(rows), 5000):
                async with db.engine.begin() as conn:
                    await write_rows(db, conn, rows[i : i + 5000], PAID)
            load = time.perf_counter() - started
            print(f"written in {load:.1f} s ({len(rows) / load:,.0f} rows/s, with rollups)")
            if backend == "postgres":
                async with db.engine.begin() as conn:
                    await conn.execute(text("ANALYZE"))
            q = BusinessQuery(truth.start, truth.end)
            report_s, raw_s = [], []
            for _ in range(runs):
                async with db.engine.connect() as conn:
                    t0 = time.perf_counter()
                    report = await business_report(conn, q, paid=PAID, revenue_usd_month=REVENUE)
                    t1 = time.perf_counter()
                    for sql in _RAW:
                        await conn.execute(text(sql), {"a": q.start, "b": q.end})
                    t2 = time.perf_counter()
                report_s.append(t1 - t0)
                raw_s.append(t2 - t1)
            assert report["mau"] == truth.mau, (report["mau"], truth.mau)
            rep, raw = statistics.median(report_s), statistics.median(raw_s)
            print(f"full report (rollups):     {rep * 1000:8.1f} ms  median of {runs}")
            print(f"DAU+MAU from raw rows:     {raw * 1000:8.1f} ms  (baseline)")
            print(f"ratio report / baseline:   {rep / raw:8.2f}")
        finally:
            await db.aclose()
            if url is not None:
                await drop_pg_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.backend, args.users, args.runs))


if __name__ == "__main__":
    main()
