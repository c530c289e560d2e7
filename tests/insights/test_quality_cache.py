"""The quality report from closed hours (`insights.hour_rollup`, `insights.marks`): hours closed
by one process are read by a fresh one, which computes only the hours not closed; what it
reports equals the uncached report, across midnight too (a follow-up after midnight saves a
cut stream; a repeat after midnight is not a regeneration); a late row, an event or a review
score on a closed hour makes that hour computed again until it is closed again; two replicas
closing at once store each hour once; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from fleetgate.insights.quality import quality_report, record_event
from fleetgate.insights.quality_cache import QualityCache
from fleetgate.insights.tables import quality_hours
from fleetgate.insights.writer import write_reviews, write_rows
from fleetgate.store.database import Database
from fleetgate.timespans import DAY_MS
from tests.tenancy.support import migrated_database

D = 20_500  # a UTC day


def _row(n: int, day: int, second: int, **fields: Any) -> dict[str, Any]:
    created = day * DAY_MS + second * 1000
    row = {
        "request_id": f"r{n}", "created_ms": created, "day": created // DAY_MS, "team_id": "t",
        "key_id": "k", "end_user": "u", "session_id": None, "conversation_id": None,
        "plan": "free", "alias": "chat", "version": "v1", "status": 200, "stream": 1,
        "finish_reason": "stop", "response_id": f"resp-{n}", "prompt_hash": f"p{n}",
        "input_tokens": 1, "output_tokens": 1, "cost_nusd": 1,
    }  # fmt: skip
    return {**row, **fields}


ROWS = [
    _row(1, D, 86_370, session_id="s1", status=499),  # cut at 23:59:30 ...
    _row(2, D + 1, 30, session_id="s1"),  # ... followed at 00:00:30: not abandoned
    _row(3, D, 79_200, conversation_id="c1", prompt_hash="x"),
    _row(4, D + 1, 600, conversation_id="c1", prompt_hash="x"),  # after midnight: not counted
    _row(5, D + 1, 1200, conversation_id="c1", prompt_hash="x"),  # regenerated
    _row(6, D + 2, 36_000, team_id="other", version="v2"),  # today
]


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


async def _raw(db: Database, first: int, last: int) -> list[dict[str, Any]]:
    async with db.engine.connect() as conn:
        return await quality_report(conn, first * DAY_MS, (last + 1) * DAY_MS, None, 120.0)


def _fresh(db: Database, clock: Clock) -> QualityCache:
    """A cache as a freshly started process has it: nothing kept (ttl 0: nothing kept)."""
    return QualityCache(db, lambda: 120.0, ttl_s=0.0, clock=clock)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_closed_hours_are_read_by_a_fresh_process_and_equal_the_uncached_report(
    kind: str, tmp_path: Path
) -> None:
    async with migrated_database(kind, tmp_path) as db:
        async with db.engine.begin() as conn:
            await write_rows(db, conn, ROWS, ())
        await write_reviews(db, [{"request_id": "r3", "created_ms": ROWS[2]["created_ms"],
                                  "team_id": "t", "alias": "chat", "version": "v1"}])  # fmt: skip
        clock = Clock((D + 2) * 86_400 + 43_200)  # noon of the third day
        closer = _fresh(db, clock)
        assert await closer.close() == 4  # every hour written to (all are over by noon)
        cache = _fresh(db, clock)
        got = await cache.report(D, D + 2, None)
        assert got == await _raw(db, D, D + 2)
        v1, v2 = got
        assert (v1["requests"], v1["abandoned"], v1["regenerated"]) == (5, 0, 1)
        assert (v2["version"], v2["requests"]) == ("v2", 1)
        assert cache.computed_hours == 0  # all read from the closed hours
        assert await cache.report(D, D + 1, "t") == [{**v1}]  # a team's cut
        assert await closer.close() == 0  # nothing written since: nothing stored again

        # a late row on the first day (23:00, r3's conversation and prompt: a regeneration)
        # counts at once: its hour and the one before (whose follow-up window reaches it) are
        # computed until they are closed again
        late = _row(8, D, 82_800, conversation_id="c1", prompt_hash="x")
        async with db.engine.begin() as conn:
            await write_rows(db, conn, [late], ())
        got = await cache.report(D, D + 2, None)
        assert got == await _raw(db, D, D + 2)
        assert (got[0]["requests"], got[0]["regenerated"]) == (6, 2)
        assert cache.computed_hours == 2
        assert await closer.close() == 2
        assert await cache.report(D, D + 2, None) == got
        assert cache.computed_hours == 2

        # an event on a closed hour's answer and a review scored there count at once too
        async with db.engine.begin() as conn:
            answer = {"request_id": "r3", "team_id": "t", "alias": "chat", "version": "v1",
                      "created_ms": ROWS[2]["created_ms"]}  # fmt: skip
            await record_event(conn, db.dialect, answer, "up")
        reports_hour = ROWS[2]["created_ms"] // 3_600_000
        await _score(db, "r3")
        got = await cache.report(D, D + 2, None)
        assert got == await _raw(db, D, D + 2)
        assert (got[0]["feedback_up"], got[0]["reviews_scored"]) == (1, 1)
        assert await closer.close() == 2  # r3's hour, and the next (its span reaches r3's)
        assert await cache.report(D, D + 2, None) == got
        async with db.engine.connect() as conn:
            stored = await conn.scalar(
                select(func.sum(quality_hours.c.reviews_scored)).where(
                    quality_hours.c.hour == reports_hour
                )
            )
        assert stored == 1


async def _score(db: Database, request_id: str) -> None:
    from fleetgate.insights.config import InsightsConfig
    from fleetgate.insights.reports import InsightsReports

    reports = InsightsReports(db, lambda: InsightsConfig(), lambda: ["chat"])
    await reports.score(request_id, {"correct": 4, "helpful": 4, "safe": 4}, "k", None)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_replicas_closing_at_once_store_each_hour_once(kind: str, tmp_path: Path) -> None:
    rows = [_row(i, D + i % 3, 600 * i, session_id=f"s{i % 7}", prompt_hash=f"p{i % 2}",
                 status=499 if i % 5 == 0 else 200) for i in range(120)]  # fmt: skip
    async with migrated_database(kind, tmp_path) as db:
        async with db.engine.begin() as conn:
            await write_rows(db, conn, rows, ())
        clock = Clock((D + 5) * 86_400)
        a, b = _fresh(db, clock), _fresh(db, clock)
        stored = await asyncio.gather(a.close(), b.close())
        async with db.engine.connect() as conn:
            hours = (await conn.execute(select(quality_hours.c.hour))).all()
        written = {r["created_ms"] // 3_600_000 for r in rows}
        assert sum(stored) >= len(written) and len(hours) == len(written)
        got = await _fresh(db, clock).report(D, D + 2, None)
        assert got == await _raw(db, D, D + 2)
        assert got[0]["requests"] == 120
