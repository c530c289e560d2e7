"""Spend reports from the rollup: the range cut into day, hour and raw pieces, and the sums
equal to a plain aggregation of the raw rows on random data, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from pathlib import Path

from sqlalchemy import select

from fleetgate.app import MIGRATIONS
from fleetgate.store import Database
from fleetgate.tenancy.spend_query import pieces
from fleetgate.tenancy.tables import spend_rollup
from fleetgate.timespans import DAY_MS, HOUR_MS
from tests.tenancy.rollup_check import (
    BASE_MS,
    assert_reports_match_raw,
    records,
    report_totals,
    write,
)

H, D = HOUR_MS, DAY_MS


def test_a_range_is_whole_days_then_whole_hours_then_raw_rows_at_its_edges() -> None:
    assert pieces(None, None) == [(D, None, None)]
    assert pieces(0, 3 * D) == [(D, 0, 3 * D)]
    # 01:30 on day 1 to 02:15 on day 3: raw to 02:00, hours to day 2, days, hours, raw
    since, until = D + H + H // 2, 3 * D + 2 * H + H // 4
    assert pieces(since, until) == [
        (None, since, D + 2 * H), (H, D + 2 * H, 2 * D), (D, 2 * D, 3 * D),
        (H, 3 * D, 3 * D + 2 * H), (None, 3 * D + 2 * H, until),
    ]  # fmt: skip
    assert pieces(H + 1, 2 * H + 5) == [(None, H + 1, 2 * H + 5)]  # no whole hour in it
    assert pieces(H + 1, 3 * H + 5) == [(None, H + 1, 2 * H), (H, 2 * H, 3 * H),
                                        (None, 3 * H, 3 * H + 5)]  # fmt: skip
    assert pieces(H + 1, H + 5) == [(None, H + 1, H + 5)]  # inside one hour: raw rows only
    assert pieces(5, 5) == [] and pieces(6, 5) == []
    # an open end takes whole periods up to it: today's row already holds all of today
    assert pieces(D + H, None) == [(H, D + H, 2 * D), (D, 2 * D, None)]
    assert pieces(None, D + 1) == [(D, None, D), (None, D, D + 1)]


def test_pieces_cover_every_millisecond_once() -> None:
    rng = random.Random(5)
    for _ in range(300):
        a = rng.randrange(-3 * D, 5 * D)
        b = a + rng.choice([1, 17, H - 1, H, H + 1, D - 1, D, 2 * D + 7 * H + 3])
        parts = pieces(a, b)
        spans = [(lo, hi) for _, lo, hi in parts]
        assert spans[0][0] == a and spans[-1][1] == b
        assert all(x[1] == y[0] for x, y in zip(spans, spans[1:], strict=False))
        for p, lo, hi in parts:
            assert lo is not None and hi is not None and lo < hi
            if p is not None:
                assert lo % p == 0 and hi % p == 0
        raw = sum(hi - lo for p, lo, hi in parts if p is None and lo is not None and hi is not None)
        assert raw < 2 * H  # at most one partial hour at each edge


async def test_reports_from_the_rollup_equal_the_raw_rows_on_random_data(
    db_url: str, tmp_path: Path
) -> None:
    rng = random.Random(16)
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        recs = records(rng, 1500)
        replays = rng.sample(recs, 200)  # records written twice (a replayed spool) count once
        batches = [recs[i : i + 250] for i in range(0, len(recs), 250)] + [replays]
        await write(db, batches)
        assert await assert_reports_match_raw(db, rng) > 300
        async with db.engine.connect() as conn:
            periods = set((await conn.execute(select(spend_rollup.c.period_ms))).scalars())
        assert periods == {H, D}
    finally:
        await db.aclose()


async def test_a_range_not_on_the_hour_counts_the_rows_at_its_edges_exactly(
    db_url: str, tmp_path: Path
) -> None:
    """Rows 1 ms either side of an hour's edge land in the range or not by their own time,
    whatever the period rows around them hold."""
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        h = BASE_MS + 10 * H
        times = [h - 1, h, h + 1, h + H - 1, h + H, h + D - 1, h + D]
        recs = records(random.Random(1), len(times))
        for rec, t in zip(recs, times, strict=True):
            rec["row"].update(created_ms=t, team_id="team_b", cost_nusd=10 ** times.index(t))
        await write(db, [recs])

        async def cost(since: int | None, until: int | None) -> int:
            return sum(v[0] for v in (await report_totals(db, [], since, until, None)).values())

        assert await cost(h, h + H) == 10**1 + 10**2 + 10**3
        assert await cost(h + 1, h + H) == 10**2 + 10**3
        assert await cost(h - 1, h + 1) == 10**0 + 10**1
        assert await cost(h + 1, h + D) == 10**2 + 10**3 + 10**4 + 10**5
        assert await cost(h + 1, None) == 10**2 + 10**3 + 10**4 + 10**5 + 10**6
        assert await cost(None, h) == 10**0
    finally:
        await db.aclose()
