"""Console pages on a large spend table: load N spend rows into SQLite and PostgreSQL, then
time the console's pages through HTTP (signed in with the master key).

    .venv/bin/python bench/console/run.py                     # 1,000,000 rows, both stores
    .venv/bin/python bench/console/run.py --rows 200000 --backends sqlite
    .venv/bin/python bench/console/run.py --write-docs        # also update docs/benchmarks.md

Rows are spread over the last 30 days across 50 teams, 500 keys, 20 aliases and 40
deployments, one tag each. Each page is fetched 5 times (after one warm-up); the median is
reported, and its ratio to the teams page (no spend query), measured in the same run.
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

from fleetgate.app import create_app  # noqa: E402
from fleetgate.config.schema import GatewayConfig  # noqa: E402
from fleetgate.config.settings import Settings  # noqa: E402

MASTER = "sk-bench-master"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
TEAMS, KEYS, ALIASES, DEPLOYMENTS = 50, 500, 20, 40
DAY_MS = 86_400_000
PAGES = [
    ("teams (baseline)", "/ui/teams"),
    ("overview", "/ui/overview"),
    ("spend by team, 30 days", "/ui/spend?group=team"),
    ("spend by alias, 30 days", "/ui/spend?group=alias"),
    ("spend by key, 30 days", "/ui/spend?group=key"),
    ("spend by deployment, 7 days", "/ui/spend?group=deployment&since={week}"),
    ("spend by tag, 7 days", "/ui/spend?group=tag&since={week}"),
    ("spend of one team, 30 days", "/ui/spend?group=alias&team=team-7"),
    ("spend CSV by key, 30 days", "/ui/spend.csv?group=key"),
    ("audit log, page 1", "/ui/audit"),
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
    week = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 6 * 86400))
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as s:
        async with s.get(url + "/ui/login") as resp:
            token = re.search(r'name="csrf" value="([^"]+)"', await resp.text())
        assert token is not None
        async with s.post(url + "/ui/login", data={"key": MASTER, "csrf": token.group(1)}) as r:
            assert r.status == 200, r.status
        out: dict[str, float] = {}
        for name, path in PAGES:
            path = path.format(week=week)
            times = []
            for i in range(runs + 1):
                start = time.perf_counter()
                async with s.get(url + path) as resp:
                    body = await resp.read()
                    assert resp.status == 200, (path, resp.status, body[:200])
                if i:  # the first is a warm-up
                    times.append((time.perf_counter() - start) * 1000)
            out[name] = statistics.median(times)
            print(f"  {name:32s} {out[name]:8.1f} ms", flush=True)
    return out


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
            if pg_url is None:
                await asyncio.to_thread(load_sqlite, Path(tmp) / "fleetgate.db", n, now_ms)
            else:
                await load_postgres(pg_url, n, now_ms)
            print(f"{backend}: {n:,} rows loaded in {time.perf_counter() - started:.1f} s")
            async with served(create_app(settings, config())) as url:
                return await time_pages(url, runs)
        finally:
            if pg_url is not None:
                admin = await asyncpg.connect(PG_ADMIN)
                await admin.execute(
                    f'DROP DATABASE IF EXISTS "{pg_url.rsplit("/", 1)[1]}" WITH (FORCE)'
                )
                await admin.close()


def section(results: dict[str, dict[str, float]], n: int, runs: int, note: str) -> str:
    backends = list(results)
    lines = [
        "## Console pages on a large spend table (`bench/console/run.py`)",
        "",
        f"{n:,} spend rows (one tag each) over 30 days, 50 teams, 500 keys, 20 aliases; each page",
        f"fetched {runs} times after a warm-up through HTTP, signed in with the master key; median",
        "milliseconds, and the ratio to the teams page (no spend query) of the same run. Target:",
        "under 300 ms. Command: `.venv/bin/python bench/console/run.py --write-docs`.",
        "",
        *([f"Note: {note}", ""] if note else []),
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPUs (shared with other work)",
        "",
        "| page | " + " | ".join(f"{b} ms | {b} ratio" for b in backends) + " |",
        "| --- | " + " | ".join("---: | ---:" for _ in backends) + " |",
    ]
    for name, _ in PAGES:
        cells = []
        for b in backends:
            base = results[b][PAGES[0][0]]
            ms = results[b][name]
            mark = "" if ms < 300 else " (over)"
            cells.append(f"{ms:.1f}{mark} | {ms / base:.1f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_docs(path: Path, text: str) -> None:
    heading = text.splitlines()[0]
    doc = path.read_text("utf-8")
    if heading in doc:
        head, rest = doc.split(heading, 1)
        nxt = rest.find("\n## ")
        doc = head + text + (rest[nxt + 1 :] if nxt >= 0 else "")
        if nxt >= 0 and not doc.endswith("\n"):
            doc += "\n"
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc, "utf-8")


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
        write_docs(REPO / "docs" / "benchmarks.md", text)


if __name__ == "__main__":
    main()
