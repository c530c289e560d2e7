"""Random spend records and the check that reports read from the rollup equal a plain
aggregation of the raw spend rows (shared by the tenancy, store and importer tests)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from sqlalchemy import and_, func, select

from fleetgate.contract.principal import Principal
from fleetgate.store import Database
from fleetgate.tenancy.records import TABLES, rows_by_table
from fleetgate.tenancy.reports import spend_report
from fleetgate.tenancy.tables import spend, spend_tags
from fleetgate.timespans import DAY_MS, HOUR_MS

MASTER = Principal("master", role="master")
BASE_MS = 1_767_225_600_000 + 5 * DAY_MS  # 2026-01-06 00:00 UTC
TEAMS = [None, "team_a", "team_b", "team_c"]
GROUPINGS = [[], ["team"], ["key"], ["alias"], ["deployment"], ["version"], ["tag"],
             ["team", "alias"], ["tag", "team"], ["alias", "key"]]  # fmt: skip
Totals = dict[tuple[Any, ...], tuple[int, ...]]


def created(rng: random.Random, span_days: int = 3, base_ms: int = BASE_MS) -> int:
    """A time in the span, often right at an hour's or a day's edge."""
    t = base_ms + rng.randrange(span_days * DAY_MS)
    if rng.random() < 0.3:
        edge = t // HOUR_MS * HOUR_MS if rng.random() < 0.7 else t // DAY_MS * DAY_MS
        t = edge + rng.choice([-1, 0, 0, 1])
    return t


def records(rng: random.Random, n: int, prefix: str = "r") -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        team = rng.choice(TEAMS)
        tags = {f"k{j}": rng.choice(["x", "y"]) for j in rng.sample(range(3), rng.randrange(3))}
        row = {
            "request_id": f"{prefix}{i}", "created_ms": created(rng),
            "key_id": f"key_{team}_{rng.randrange(3)}", "team_id": team,
            "alias": rng.choice(["a", "b", "c"]), "deployment": rng.choice([None, "d1", "d2"]),
            "version": rng.choice([None, "v1", "v2"]), "status": rng.choice([200, 200, 429]),
            "input_tokens": rng.randrange(5000), "output_tokens": rng.randrange(900),
            "cached_tokens": rng.randrange(100),
            "cache_write_tokens": rng.choice([None, rng.randrange(50)]),
            "cost_nusd": rng.randrange(10**9), "latency_ms": 5, "tags": tags,
        }  # fmt: skip
        out.append({"kind": "spend", "row": row})
    return out


async def write(db: Database, batches: list[list[dict[str, Any]]]) -> None:
    """The batches through the record writer's bulk insert, in one worker thread."""

    def run() -> None:
        bulk = db.bulk_insert(TABLES)
        try:
            for batch in batches:
                bulk.insert(rows_by_table(batch))
        finally:
            bulk.close()

    await asyncio.to_thread(run)


async def raw_totals(
    db: Database, group_by: list[str], since: int | None, until: int | None, team: str | None
) -> Totals:
    """The reference: one ``GROUP BY`` over the raw spend rows (and their tags)."""
    columns = {"team": spend.c.team_id, "key": spend.c.key_id, "alias": spend.c.alias,
               "deployment": spend.c.deployment, "version": spend.c.version,
               "tag": spend_tags.c.tag}  # fmt: skip
    keys = [columns[g] for g in group_by]
    query = select(
        *keys, func.sum(spend.c.cost_nusd), func.count(), func.sum(spend.c.input_tokens),
        func.sum(spend.c.output_tokens), func.sum(spend.c.cached_tokens),
        func.sum(spend.c.cache_write_tokens),
    ).select_from(spend)  # fmt: skip
    if "tag" in group_by:
        query = query.outerjoin(spend_tags, spend_tags.c.request_id == spend.c.request_id)
    where = [spend.c.created_ms >= (since if since is not None else -(2**62))]
    where.append(spend.c.created_ms < (until if until is not None else 2**62))
    if team is not None:
        where.append(spend.c.team_id == team)
    query = query.where(and_(*where))
    if keys:
        query = query.group_by(*keys)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    n = len(group_by)
    return {
        tuple(r[:n]): tuple(int(v or 0) for v in r[n:])
        for r in rows
        if n or r[n + 1]  # no groups: the one row, when anything matched
    }


async def report_totals(
    db: Database, group_by: list[str], since: int | None, until: int | None, team: str | None
) -> Totals:
    rows = await spend_report(db, MASTER, group_by, since, until, team)
    fields = ("spend_nusd", "requests", "input_tokens", "output_tokens", "cached_tokens",
              "cache_write_tokens")  # fmt: skip
    return {
        tuple(r[g] for g in group_by): tuple(r[f] for f in fields)
        for r in rows
        if group_by or r["requests"]
    }


def ranges(rng: random.Random, n: int, base: int = BASE_MS) -> list[tuple[int | None, int | None]]:
    """Open, day- and hour-aligned and unaligned ranges over the span (and a bit beyond)."""
    base = base // DAY_MS * DAY_MS
    fixed: list[tuple[int | None, int | None]] = [
        (None, None), (base, None), (None, base + DAY_MS),
        (base + DAY_MS, base + 2 * DAY_MS), (base + 5 * HOUR_MS, base + 29 * HOUR_MS),
        (base + HOUR_MS - 1, base + 2 * DAY_MS + 1), (base + 7, base + 8),
        (base + DAY_MS, base + DAY_MS),
    ]  # fmt: skip
    for _ in range(n):
        a, b = sorted(created(rng, base_ms=base) + rng.choice([0, 0, 1, -1]) for _ in range(2))
        fixed.append((a if rng.random() < 0.9 else None, b if rng.random() < 0.9 else None))
    return fixed


async def assert_reports_match_raw(
    db: Database, rng: random.Random, n_ranges: int = 12, base_ms: int = BASE_MS
) -> int:
    """Every grouping, range (over three days from ``base_ms``) and team filter: the report
    equals the raw aggregation. Returns how many reports were compared."""
    compared = 0
    for since, until in ranges(rng, n_ranges, base_ms):
        for group_by in GROUPINGS:
            for team in (None, "team_b"):
                want = await raw_totals(db, group_by, since, until, team)
                got = await report_totals(db, group_by, since, until, team)
                assert got == want, (group_by, since, until, team)
                compared += 1
    return compared
