"""The history readers: CSV (and its errors), and the spend table on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.errors import InvalidRequest
from fleetgate.plan.history import (
    HourlyHistory,
    parse_hour,
    read_history_csv,
    read_history_store,
    write_history_csv,
)
from fleetgate.store.database import Database, database_url
from fleetgate.tenancy.tables import spend

H0 = parse_hour("2026-03-02T00:00:00Z")


def test_csv_round_trip_fills_missing_hours_with_zero() -> None:
    text = (
        "hour,alias,requests,input_tokens,output_tokens\n"
        "2026-03-02T00:00:00Z,chat,10,1000,200\n"
        f"{(H0 + 3) * 3600},chat,5,500,100\n"
        "2026-03-02T01:00:00,code,2,50,5\n"
        "2026-03-02T03:00:00Z,chat,1,100,20\n"
    )
    history = read_history_csv(text)
    assert (history.start, history.hours, history.aliases) == (H0, 4, ["chat", "code"])
    assert list(history.series["chat"]["requests"]) == [10, 0, 0, 6]
    assert list(history.total("requests")) == [10, 2, 0, 6]
    again = read_history_csv(write_history_csv(history))
    assert list(again.total("input_tokens")) == list(history.total("input_tokens"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("hour,alias,requests\n2026-03-02,chat,1\n", "missing column input_tokens, output_tokens"),
        ("hour,alias,requests,input_tokens,output_tokens\nyesterday,chat,1,1,1\n",
         "line 2: 'yesterday' is neither ISO-8601"),
        ("hour,alias,requests,input_tokens,output_tokens\n2026-03-02,chat,x,1,1\n",
         "line 2: requests and tokens must be numbers"),
        ("hour,alias,requests,input_tokens,output_tokens\n2026-03-02,,1,1,1\n", "empty alias"),
        ("hour,alias,requests,input_tokens,output_tokens\n2026-03-02,chat,-1,1,1\n", ">= 0"),
        ("hour,alias,requests,input_tokens,output_tokens\n", "no rows"),
    ],
)  # fmt: skip
def test_bad_csv_is_a_clear_error(text: str, match: str) -> None:
    with pytest.raises(InvalidRequest, match=match):
        read_history_csv(text)


def test_unknown_alias_and_missing_file() -> None:
    history = HourlyHistory.from_rows([(H0, "chat", 1, 1, 1)])
    with pytest.raises(InvalidRequest, match="no history for alias nope; it has chat"):
        history.only(["nope"])
    with pytest.raises(InvalidRequest, match="cannot read the history"):
        read_history_csv(Path("/nonexistent/history.csv"))


def _row(i: int, ms: int, alias: str, status: int = 200) -> dict[str, object]:
    return {
        "request_id": f"r{i}", "created_ms": ms, "key_id": "k", "team_id": "t", "alias": alias,
        "deployment": "d", "version": "v1", "status": status, "input_tokens": 100 + i,
        "output_tokens": 10, "cached_tokens": 0, "cost_nusd": 1, "latency_ms": 5, "tags": {},
    }  # fmt: skip


async def _check_store(db: Database) -> None:
    await db.migrate()
    base = H0 * 3_600_000
    rows = [
        _row(0, base + 1, "chat"),
        _row(1, base + 3_599_999, "chat"),
        _row(2, base + 2 * 3_600_000 + 5, "chat"),
        _row(3, base + 2 * 3_600_000 + 6, "chat", status=500),  # failed: not traffic served
        _row(4, base + 3_600_000, "code"),
        _row(5, base + 9 * 3_600_000, "old"),  # outside --until
    ]
    await db.insert_ignore(spend, rows)
    history = await read_history_store(db, since_ms=base, until_ms=base + 5 * 3_600_000)
    assert (history.start, history.hours, history.aliases) == (H0, 3, ["chat", "code"])
    assert list(history.series["chat"]["requests"]) == [2, 0, 1]
    assert list(history.series["chat"]["input_tokens"]) == [201, 0, 102]
    assert list(history.series["code"]["output_tokens"]) == [0, 10, 0]
    only = await read_history_store(db, aliases=["old"])
    assert (only.start, only.hours) == (H0 + 9, 1)
    with pytest.raises(InvalidRequest, match="no requests in that window"):
        await read_history_store(db, since_ms=base + 100 * 3_600_000)


async def test_store_reader_sqlite(tmp_path: Path) -> None:
    db = Database(database_url(None, tmp_path), migrations=MIGRATIONS)
    try:
        await _check_store(db)
    finally:
        await db.aclose()


async def test_store_reader_postgresql(shared_pg_url: str) -> None:
    db = Database(database_url(shared_pg_url, Path(".")), migrations=MIGRATIONS)
    try:
        await _check_store(db)
    finally:
        await db.aclose()
