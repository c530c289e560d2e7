"""The console's insights pages at about 1M requests: a synthetic month (10k users, 3 plans, the
data generation of ``business_1m.py``) written through the insights writer's path, with some
cut streams, regenerations, feedback, groundedness samples and scored review items; then the
finished days and hours are closed once (what the background does for every replica:
`InsightsReports.close`), and a gateway started fresh with ``report_cache_s: 0`` (no report
kept in memory: every fetch computes its report from the store) serves each page over HTTP,
signed in with the master key, timed server to client: the first fetch, then the median of
``--runs``. The teams page (no insights query) is measured in the same run as the baseline;
the admin API's JSON of the same reports shows what rendering adds.

    .venv/bin/python bench/insights/console_1m.py [--backend postgres|sqlite] [--users 10000]
        [--runs 5] [--reuse-url URL | --reuse-dir DIR]

``--reuse-url``/``--reuse-dir``: a PostgreSQL database / SQLite data directory this script (or
an older fleetgate) loaded: migrated to the newest revision, closed and timed without writing
the month again.

Target (issue #37): every page under 300 ms at 1M requests, uncached, on a fresh process.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from sqlalchemy import text  # noqa: E402
from tests.insights.synthetic import PAID, synthetic_month  # noqa: E402
from tests.tenancy.support import create_pg_database, drop_pg_database  # noqa: E402

from fleetgate.app import MIGRATIONS, create_app  # noqa: E402
from fleetgate.config.schema import GatewayConfig  # noqa: E402
from fleetgate.config.settings import Settings  # noqa: E402
from fleetgate.http.serving import served  # noqa: E402
from fleetgate.insights.business import BusinessQuery, business_report, iso_day  # noqa: E402
from fleetgate.insights.config import InsightsConfig  # noqa: E402
from fleetgate.insights.hour_rollup import hour_report  # noqa: E402
from fleetgate.insights.reports import InsightsReports  # noqa: E402
from fleetgate.insights.tables import events, grounding, reviews  # noqa: E402
from fleetgate.insights.writer import write_rows  # noqa: E402
from fleetgate.store import Database  # noqa: E402

MASTER = "sk-bench-master"


def _enrich(rows: list[dict[str, Any]], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Quality signals on the synthetic rows (in place): 3% cut streams, a prompt hash on each
    (5% repeat their session's previous one: regenerations), two versions; and the side tables'
    rows: feedback on 5% of answers, groundedness on 1%, 2,000 review items (half scored)."""
    side: dict[str, list[dict[str, Any]]] = {"events": [], "grounding": [], "reviews": []}
    for i, r in enumerate(rows):
        r["version"] = "v2" if i % 4 == 0 else "v1"
        r["status"] = 499 if rng.random() < 0.03 else 200
        r["prompt_hash"] = f"{rng.randrange(1 << 60):032x}" if rng.random() > 0.05 else "same"
        r["response_id"] = f"chatcmpl-{r['request_id']}"
        base = {"request_id": r["request_id"], "team_id": r["team_id"], "alias": r["alias"],
                "version": r["version"]}  # fmt: skip
        if rng.random() < 0.05:
            value = rng.choice(("up", "up", "down"))
            side["events"].append({**base, "category": "feedback", "value": value,
                                   "created_ms": r["created_ms"] + 1000})  # fmt: skip
        if rng.random() < 0.01:
            score = rng.random()
            side["grounding"].append({"sample_id": r["request_id"], "created_ms": r["created_ms"],
                                      "team_id": r["team_id"], "alias": r["alias"],
                                      "version": r["version"], "score": score,
                                      "grounded": int(score >= 0.6)})  # fmt: skip
        if len(side["reviews"]) < 2000 and rng.random() < 0.003:
            scored = len(side["reviews"]) % 2 == 0
            side["reviews"].append({
                **{k: v for k, v in base.items()}, "created_ms": r["created_ms"],
                "prompt": [{"role": "user", "content": "hello " * 20}], "response": "hi " * 50,
                "scores": {"correct": 4, "helpful": 3, "safe": 5} if scored else None,
                "score": 4.0 if scored else None, "reviewer": "master" if scored else None,
                "scored_ms": r["created_ms"] + 5000 if scored else None,
            })  # fmt: skip
    return side


async def _load(db: Database, rows: list[dict[str, Any]], side: dict[str, Any]) -> float:
    started = time.perf_counter()
    for i in range(0, len(rows), 5000):
        async with db.engine.begin() as conn:
            await write_rows(db, conn, rows[i : i + 5000], PAID)
    for table, name in ((events, "events"), (grounding, "grounding"), (reviews, "reviews")):
        for i in range(0, len(side[name]), 5000):
            await db.insert_ignore(table, side[name][i : i + 5000])
    return time.perf_counter() - started


def _config(share_all: bool) -> GatewayConfig:
    deployment = {"provider": "openai", "model": "tiny", "api_base": "http://127.0.0.1:9/v1"}
    return GatewayConfig.model_validate({
        "models": [{"alias": "chat", "deployments": [deployment]}],
        "health": {"probe_interval_s": 30},
        "insights": {"revenue_usd_month": {"paid": 20.0, "enterprise": 60.0},
                     "paid_plans": list(PAID), "report_cache_s": 0,
                     "metrics_interval_s": 3600},
    })  # fmt: skip


async def _sign_in(url: str) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(url + "/ui/login") as resp:
        token = re.search(r'name="csrf" value="([^"]+)"', await resp.text())
    assert token is not None
    async with session.post(url + "/ui/login", data={"key": MASTER, "csrf": token.group(1)},
                            allow_redirects=False) as resp:  # fmt: skip
        assert resp.status == 302, await resp.text()
    return session


async def _time(http: aiohttp.ClientSession, url: str, runs: int, **kw: Any) -> tuple[float, float]:
    """The first fetch (it may fill a cache) and the median of the ``runs`` after it."""
    times = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        async with http.get(url, **kw) as resp:
            body = await resp.read()
            assert resp.status == 200, (url, resp.status, body[:300])
        times.append((time.perf_counter() - t0) * 1000)
    return times[0], statistics.median(times[1:])


async def _refreshed(http: aiohttp.ClientSession, base: str) -> float:
    """Seconds until the first metrics refresh (5 s after start; it warms the default views)
    has set its gauges."""
    started = time.perf_counter()
    auth = {"Authorization": f"Bearer {MASTER}"}
    while time.perf_counter() - started < 300:
        async with http.get(base + "/metrics", headers=auth) as resp:
            if "fleetgate_insights_refresh_seconds{" in await resp.text():
                return time.perf_counter() - started
        await asyncio.sleep(0.5)
    raise TimeoutError("the insights metrics were not refreshed within 300 s")


async def _close(db: Database) -> None:
    """Close the finished days and hours, as the background does (timed: once per month)."""
    reports = InsightsReports(db, lambda: InsightsConfig(), lambda: ["chat"])
    t0 = time.perf_counter()
    days, hours = await reports.close(budget_s=3600.0)
    print(f"closed {days} days and {hours} hours in {time.perf_counter() - t0:.1f} s "
          "(once; the background does it as days and hours end)")  # fmt: skip


async def _time_reports(db: Database, first: int, last: int, runs: int) -> None:
    """The reports as a page computes them with nothing in memory (a fresh connection each)."""
    business, quality, computed = [], [], 0
    for _ in range(runs):
        async with db.engine.connect() as conn:
            t0 = time.perf_counter()
            await business_report(conn, BusinessQuery(first, last), paid=PAID,
                                  revenue_usd_month={"paid": 20.0})  # fmt: skip
            business.append(time.perf_counter() - t0)
        async with db.engine.connect() as conn:
            t0 = time.perf_counter()
            _, computed = await hour_report(conn, first * 24, last * 24 + 23, None, 120_000)
            quality.append(time.perf_counter() - t0)
    for name, values in (("business report, 30 days, every team", business),
                         ("quality report, 30 days, every team", quality)):  # fmt: skip
        print(f"{name:46} {statistics.median(values) * 1000:10.1f} ms  median of {len(values)}")
    print(f"(quality: {computed} hours computed from the requests, the rest closed)")


async def run(
    backend: str, users: int, runs: int, reuse: str | None = None, reuse_dir: str | None = None
) -> None:
    rng = random.Random(11)
    today = int(time.time() // 86_400)
    rows, truth = synthetic_month(users=users, per_day=(6, 34), start=today - 29)
    rows.sort(key=lambda r: r["created_ms"])  # stored in arrival order, as the writer does
    side = _enrich(rows, rng)
    print(f"{len(rows):,} requests, {truth.active:,} users, {len(side['events']):,} feedback "
          f"events, {len(side['grounding']):,} groundedness samples, "
          f"{len(side['reviews']):,} review items; backend {backend}")  # fmt: skip
    now_ms = int(time.time() * 1000)
    print(
        f"{sum(r['created_ms'] > now_ms for r in rows):,} of them later today than now "
        "(the generator spreads each day over 24 h): open hours, computed per page"
    )
    url = reuse or (await create_pg_database() if backend == "postgres" else None)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(reuse_dir or scratch)
        db = Database.from_url(url, tmp, migrations=MIGRATIONS)
        try:
            t0 = time.perf_counter()
            await db.migrate()
            print(f"migrated in {time.perf_counter() - t0:.1f} s")
            if reuse is None and reuse_dir is None:
                load = await _load(db, rows, side)
                print(f"written in {load:.1f} s (with rollups)")
            if backend == "postgres":
                async with db.engine.begin() as conn:
                    await conn.execute(text("ANALYZE"))
            await _close(db)
            await _time_reports(db, truth.start, truth.end, runs)
        finally:
            await db.aclose()
        settings = Settings(master_key=MASTER, data_dir=tmp, database_url=url,
                            watch_config=False)  # fmt: skip
        app = create_app(settings, _config(True))
        dates = f"since={iso_day(truth.start)}&until={iso_day(truth.end)}"
        day = f"since={iso_day(truth.end)}&until={iso_day(truth.end)}"
        pages = [
            ("teams page (baseline, no insights query)", "/ui/teams"),
            ("business, 30 days", f"/ui/insights?{dates}"),
            ("business, 30 days, one team", f"/ui/insights?{dates}&team=team-1"),
            ("quality, 30 days", f"/ui/insights/quality?{dates}"),
            ("quality, last day", f"/ui/insights/quality?{day}"),
            ("review queue (unscored)", "/ui/insights/reviews"),
            ("review queue (scored)", "/ui/insights/reviews?show=scored"),
            ("key hygiene", "/ui/insights/keys"),
            ("JSON: business, 30 days", f"/admin/insights/business?start={iso_day(truth.start)}"
                                        f"&end={iso_day(truth.end)}"),
            ("JSON: quality, 30 days", f"/admin/insights/quality?start={iso_day(truth.start)}"
                                       f"&end={iso_day(truth.end)}"),
            # the admin API takes the team's id as stored (the rows' "team-1"); the console
            # page above resolves the name to the team created here, which has no rows
            ("JSON: business, 30 days, one team", f"/admin/insights/business?start="
             f"{iso_day(truth.start)}&end={iso_day(truth.end)}&team=team-1"),
            ("JSON: quality, 30 days, one team", f"/admin/insights/quality?start="
             f"{iso_day(truth.start)}&end={iso_day(truth.end)}&team=team-1"),
        ]  # fmt: skip
        async with served(app) as base:
            for team in ("team-0", "team-1", "team-2"):  # the synthetic teams, by these names
                async with aiohttp.ClientSession() as plain:
                    await plain.post(base + "/admin/teams", json={"name": team},
                                     headers={"Authorization": f"Bearer {MASTER}"})  # fmt: skip
            http = await _sign_in(base)
            try:
                baseline = None
                warmed = await _refreshed(http, base)  # the first metrics refresh is done
                print(f"first background refresh done {warmed:.1f} s after signing in")
                print(f"{'page':46} {'first ms':>9} {'median ms':>10} {'x baseline':>10}")
                for name, path in pages:
                    headers = {"Authorization": f"Bearer {MASTER}"} if path[1] == "a" else {}
                    first, ms = await _time(http, base + path, runs, headers=headers)
                    baseline = baseline or ms
                    flag = "" if max(first, ms) < 300 else "  (over 300 ms)"
                    print(f"{name:46} {first:9.1f} {ms:10.1f} {ms / baseline:10.2f}{flag}")
            finally:
                await http.close()
    if url is not None and reuse is None:
        await drop_pg_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reuse-url", help="a PostgreSQL database this script loaded the same "
                        "day (same --users): time it again without writing the month")  # fmt: skip
    parser.add_argument("--reuse-dir", help="a SQLite data directory (fleetgate.db) loaded the "
                        "same way")  # fmt: skip
    args = parser.parse_args()
    asyncio.run(run(args.backend, args.users, args.runs, args.reuse_url, args.reuse_dir))


if __name__ == "__main__":
    main()
