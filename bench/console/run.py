"""Console pages and admin JSON lists on a large spend table: load N spend rows into SQLite and
PostgreSQL, roll them up (the statement migration 0011 runs), then time every console page and
JSON list through HTTP (signed in with the master key).

    .venv/bin/python bench/console/run.py                     # 1,000,000 rows, both stores
    .venv/bin/python bench/console/run.py --rows 200000 --backends sqlite
    .venv/bin/python bench/console/run.py --write-docs  # + docs/results/benchmarks.md, console.md

Rows are spread over the last 30 days across 50 teams, 500 keys, 20 aliases and 40
deployments, one tag each. Each page is fetched 5 times (after one warm-up); the median is
reported, and its ratio to the teams page (no spend query), measured in the same run. The
same run also times the old way, one ``GROUP BY`` over the raw spend rows
(`raw_spend_query`), for three of the reports: the baseline the rollup is measured against.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.tenancy.support import served  # noqa: E402

from fleetgate.app import MIGRATIONS, create_app  # noqa: E402
from fleetgate.config.schema import GatewayConfig  # noqa: E402
from fleetgate.config.settings import Settings  # noqa: E402
from fleetgate.store import Database  # noqa: E402
from fleetgate.tenancy.rollup import rollup_statement  # noqa: E402
from fleetgate.tenancy.spend_query import raw_spend_query  # noqa: E402

MASTER = "sk-bench-master"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
TEAMS, KEYS, ALIASES, DEPLOYMENTS = 50, 500, 20, 40
DAY_MS = 86_400_000
PAGES = [
    ("teams (baseline)", "/ui/teams"),
    ("overview (spend today)", "/ui/overview"),
    ("one team and its keys", "/ui/teams/team_007"),
    ("spend by team, 30 days", "/ui/spend?group=team"),
    ("spend by alias, 30 days", "/ui/spend?group=alias"),
    ("spend by key, 30 days", "/ui/spend?group=key"),
    ("spend by key, 30 days, page 5", "/ui/spend?group=key&page=5"),
    ("spend by deployment, 7 days", "/ui/spend?group=deployment&since={week}"),
    ("spend by tag, 7 days", "/ui/spend?group=tag&since={week}"),
    ("spend by version, 30 days", "/ui/spend?group=version"),
    ("spend of one team, 30 days", "/ui/spend?group=alias&team=team-7"),
    ("spend CSV by key, 30 days", "/ui/spend.csv?group=key"),
    ("models", "/ui/models"),
    ("routing decisions", "/ui/routing"),
    ("audit log, page 1", "/ui/audit"),
    ("request audit, page 1", "/ui/audit?kind=request"),
    ("guardrail events", "/ui/guardrails"),
    ("playground", "/ui/playground"),
    ("JSON: GET /admin/teams", "/admin/teams"),
    ("JSON: GET /admin/keys", "/admin/keys"),
    ("JSON: GET /admin/spend by team, all time", "/admin/spend?group_by=team"),
    ("JSON: GET /admin/spend by key, 30 days", "/admin/spend?group_by=key&since={month}"),
    (
        "JSON: GET /admin/spend by team+alias, 25.5 h",
        "/admin/spend?group_by=team,alias&since={day_and_half}",
    ),
    ("JSON: GET /admin/spend by tag, 7 days", "/admin/spend?group_by=tag&since={week}"),
    ("JSON: GET /admin/audit", "/admin/audit"),
]
# The old way (before the rollup), timed on the same data: one GROUP BY over the raw rows.
RAW = [
    ("raw GROUP BY: spend by team, 30 days", ["team"]),
    ("raw GROUP BY: spend by key, 30 days", ["key"]),
    ("raw GROUP BY: spend by tag, 30 days", ["tag"]),
]


def config() -> GatewayConfig:
    return GatewayConfig.model_validate({
        "models": [{"alias": f"alias-{i}", "deployments": [
            {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]}
            for i in range(3)],
        "health": {"probe_interval_s": 3600},
    })  # fmt: skip


CHUNK = 50_000


def rows(start: int, n: int, now_ms: int) -> tuple[list[tuple[Any, ...]], list[tuple[str, str]]]:
    """Spend rows ``start`` .. ``start + n`` (the same ones on every run: seeded)."""
    rng = random.Random(start)
    spend, tags = [], []
    for i in range(start, start + n):
        team = rng.randrange(TEAMS)
        key = team * (KEYS // TEAMS) + rng.randrange(KEYS // TEAMS)
        alias = rng.randrange(ALIASES)
        rid = f"req-{i:09d}"
        inp, out = rng.randrange(50, 4000), rng.randrange(10, 800)
        spend.append((
            rid, now_ms - rng.randrange(30 * DAY_MS), f"key_{key:05d}", f"team_{team:03d}",
            f"alias-{alias}", f"alias-{alias}/{rng.randrange(2)}", "v1", 200, inp, out, 0,
            inp * 150 + out * 600, rng.randrange(20, 2000), "{}",
        ))  # fmt: skip
        tags.append((rid, f"env={'prod' if i % 3 else 'dev'}"))
    return spend, tags


SPEND_COLUMNS = ("request_id", "created_ms", "key_id", "team_id", "alias", "deployment",
                 "version", "status", "input_tokens", "output_tokens", "cached_tokens",
                 "cost_nusd", "latency_ms", "tags")  # fmt: skip
TEAM_ROWS = [(f"team_{t:03d}", f"team-{t}", "{}", int(time.time() * 1000)) for t in range(TEAMS)]


def chunks(n: int, now_ms: int) -> Any:
    for start in range(0, n, CHUNK):
        yield rows(start, min(CHUNK, n - start), now_ms)


def load_sqlite(path: Path, n: int, now_ms: int) -> None:
    conn = sqlite3.connect(path)
    try:
        marks = ",".join("?" * len(SPEND_COLUMNS))
        insert = f"INSERT INTO fg_spend ({','.join(SPEND_COLUMNS)}) VALUES ({marks})"
        for spend, tags in chunks(n, now_ms):
            conn.executemany(insert, spend)
            conn.executemany("INSERT INTO fg_spend_tags (request_id, tag) VALUES (?, ?)", tags)
        conn.executemany(
            "INSERT INTO fg_teams (id, name, tags, created_ms, log_payloads) VALUES (?,?,?,?,0)",
            TEAM_ROWS,
        )
        conn.commit()
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def load_postgres(url: str, n: int, now_ms: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        for spend, tags in chunks(n, now_ms):
            await conn.copy_records_to_table("fg_spend", records=spend, columns=SPEND_COLUMNS)
            await conn.copy_records_to_table("fg_spend_tags", records=tags,
                                             columns=("request_id", "tag"))  # fmt: skip
        await conn.executemany(
            "INSERT INTO fg_teams (id, name, tags, created_ms, log_payloads) "
            "VALUES ($1, $2, $3::json, $4, false)",
            TEAM_ROWS,
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def time_pages(url: str, runs: int) -> dict[str, float]:
    now = time.time()
    week = time.strftime("%Y-%m-%d", time.gmtime(now - 6 * 86400))
    month = int(now - 30 * 86400)  # epoch seconds
    day_and_half = int(now - 25.5 * 3600)  # not on the hour: raw rows at the edges
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as s:
        async with s.get(url + "/ui/login") as resp:
            token = re.search(r'name="csrf" value="([^"]+)"', await resp.text())
        assert token is not None
        async with s.post(url + "/ui/login", data={"key": MASTER, "csrf": token.group(1)}) as r:
            assert r.status == 200, r.status
        out: dict[str, float] = {}
        for name, path in PAGES:
            path = path.format(week=week, month=month, day_and_half=day_and_half)
            headers = {"Authorization": f"Bearer {MASTER}"} if path.startswith("/admin") else {}
            times = []
            for i in range(runs + 1):
                start = time.perf_counter()
                async with s.get(url + path, headers=headers) as resp:
                    body = await resp.read()
                    assert resp.status == 200, (path, resp.status, body[:200])
                if i:  # the first is a warm-up
                    times.append((time.perf_counter() - start) * 1000)
            out[name] = statistics.median(times)
            print(f"  {name:48s} {out[name]:8.1f} ms", flush=True)
    return out


async def time_raw(db_url: str, runs: int) -> dict[str, float]:
    """The reports as one GROUP BY over the raw rows (what the pages ran before 0011)."""
    db = Database.from_url(db_url, REPO, migrations=MIGRATIONS)
    since = int((time.time() - 30 * 86400) * 1000)
    out: dict[str, float] = {}
    try:
        for name, group in RAW:
            times = []
            for i in range(runs + 1):
                start = time.perf_counter()
                async with db.engine.connect() as conn:
                    (await conn.execute(raw_spend_query(group, since, None, None))).all()
                if i:
                    times.append((time.perf_counter() - start) * 1000)
            out[name] = statistics.median(times)
            print(f"  {name:48s} {out[name]:8.1f} ms", flush=True)
    finally:
        await db.aclose()
    return out


def roll_up_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(rollup_statement("sqlite", "fg_spend"))
        conn.commit()
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def roll_up_postgres(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(rollup_statement("postgresql", "fg_spend"))
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def measure(backend: str, n: int, runs: int, now_ms: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        pg_url = None
        if backend == "postgres":
            name = f"fg_bench_console_{os.getpid()}"
            admin = await asyncpg.connect(PG_ADMIN)
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await admin.execute(f'CREATE DATABASE "{name}"')
            await admin.close()
            pg_url = f"postgresql://postgres@127.0.0.1:5432/{name}"
        try:
            settings = Settings(master_key=MASTER, data_dir=Path(tmp), database_url=pg_url,
                                watch_config=False)  # fmt: skip
            # First start migrates the schema; the rows go in while no gateway runs.
            async with served(create_app(settings, config())):
                pass
            started = time.perf_counter()
            path = Path(tmp) / "fleetgate.db"
            if pg_url is None:
                await asyncio.to_thread(load_sqlite, path, n, now_ms)
            else:
                await load_postgres(pg_url, n, now_ms)
            loaded = time.perf_counter()
            print(f"{backend}: {n:,} rows loaded in {loaded - started:.1f} s")
            # The rows went in behind the writers' backs: roll them up as migration 0011 does.
            if pg_url is None:
                await asyncio.to_thread(roll_up_sqlite, path)
            else:
                await roll_up_postgres(pg_url)
            rolled = time.perf_counter() - loaded
            print(f"{backend}: rolled up in {rolled:.1f} s")
            async with served(create_app(settings, config())) as url:
                out = await time_pages(url, runs)
            out.update(await time_raw(pg_url or f"sqlite:///{path}", runs))
            out["rollup backfill, seconds"] = rolled
            return out
        finally:
            if pg_url is not None:
                admin = await asyncpg.connect(PG_ADMIN)
                await admin.execute(
                    f'DROP DATABASE IF EXISTS "{pg_url.rsplit("/", 1)[1]}" WITH (FORCE)'
                )
                await admin.close()


PARENT = "## Console pages on a large spend table (`bench/console/run.py`)"
MARKS = ("<!-- console-bench: begin -->", "<!-- console-bench: end -->")


def table(results: dict[str, dict[str, float]]) -> list[str]:
    backends = list(results)
    lines = [
        "| page or list | " + " | ".join(f"{b} ms | {b} ratio" for b in backends) + " |",
        "| --- | " + " | ".join("---: | ---:" for _ in backends) + " |",
    ]
    for name in [n for n, _ in PAGES] + [n for n, _ in RAW]:
        cells = []
        for b in backends:
            base = results[b][PAGES[0][0]]
            ms = results[b][name]
            mark = "" if ms < 300 else " (over)"
            cells.append(f"{ms:.1f}{mark} | {ms / base:.1f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    backfill = ", ".join(f"{b} {results[b]['rollup backfill, seconds']:.0f} s" for b in backends)
    return [*lines, "", f"Rolling the rows up (migration 0011's backfill statement): {backfill}."]


def section(results: dict[str, dict[str, float]], n: int, runs: int, note: str) -> str:
    lines = [
        f"### With the spend rollup (migration 0011), {n:,} rows",
        "",
        f"{n:,} spend rows (one tag each) over 30 days, 50 teams, 500 keys, 20 aliases, 40",
        f"deployments; each console page and admin JSON list fetched {runs} times after a warm-up",
        "through HTTP, signed in with the master key; median milliseconds, and the ratio to the",
        "teams page (no spend query) of the same run. The `raw GROUP BY` rows are the old way, one",
        "query over the raw spend rows, timed on the same data in the same run (the baseline).",
        "Target of issue 16: under 300 ms with one million rows in PostgreSQL. Command:",
        "`.venv/bin/python bench/console/run.py --write-docs`.",
        "",
        *([f"Note: {note}", ""] if note else []),
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPUs shared with other work (load average "
        f"{os.getloadavg()[0]:.1f} at the end).",
        "",
        *table(results),
    ]
    return "\n".join(lines) + "\n"


def write_docs(benchmarks: Path, console: Path, text: str) -> None:
    """The section into docs/results/benchmarks.md (replacing one of the same title, else at the end
    of the console section) and the table between the markers of docs/console.md."""
    heading = text.splitlines()[0]
    doc = benchmarks.read_text("utf-8")
    if heading in doc:
        head, rest = doc.split(heading, 1)
        nxt = min((i for i in (rest.find("\n## "), rest.find("\n### ")) if i >= 0), default=-1)
        doc = head + text + (rest[nxt:] if nxt >= 0 else "")
    else:
        at = doc.index(PARENT) + len(PARENT)
        nxt = doc.find("\n## ", at)
        nxt = len(doc) if nxt < 0 else nxt + 1
        doc = doc[:nxt].rstrip("\n") + "\n\n" + text + "\n" + doc[nxt:]
    benchmarks.write_text(doc, "utf-8")
    page = console.read_text("utf-8")
    head, rest = page.split(MARKS[0], 1)
    _, tail = rest.split(MARKS[1], 1)
    body = "\n".join(text.splitlines()[2:])  # without the title
    console.write_text(f"{head}{MARKS[0]}\n{body}{MARKS[1]}{tail}", "utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--backends", default="sqlite,postgres")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    now_ms = int(time.time() * 1000)
    results = {}
    for backend in args.backends.split(","):
        results[backend] = asyncio.run(measure(backend, args.rows, args.runs, now_ms))
    text = section(results, args.rows, args.runs, args.note)
    print(text)
    if args.write_docs:
        write_docs(REPO / "docs" / "results" / "benchmarks.md", REPO / "docs" / "console.md", text)


if __name__ == "__main__":
    main()
