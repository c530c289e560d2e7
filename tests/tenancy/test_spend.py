"""Spend: exact costs, idempotent batches, the spool through a database outage and a crash,
budgets that stop at the limit, alerts once each, remaining-budget gauges."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import func, select

from fleetgate.app import MIGRATIONS
from fleetgate.config.schema import Price
from fleetgate.store import Database
from fleetgate.tenancy.money import cost_nusd
from fleetgate.tenancy.tables import request_audit, spend
from fleetgate.tenancy.writer import RecordWriter
from tests.tenancy.support import (
    PRICE,
    TcpProxy,
    crash_writer,
    create_pg_database,
    drop_pg_database,
    running_gateway,
)


def _independent_cost(usage: dict[str, Any], price: dict[str, float]) -> Decimal:
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return (
        Decimal(usage["prompt_tokens"] - cached) * Decimal(str(price["input_per_mtok"]))
        + Decimal(cached) * Decimal(str(price["cached_input_per_mtok"]))
        + Decimal(usage["completion_tokens"]) * Decimal(str(price["output_per_mtok"]))
    ) / Decimal(1_000_000)


def test_cost_is_exact_in_nano_dollars() -> None:
    price = Price(input_per_mtok=0.15, output_per_mtok=0.6, cached_input_per_mtok=0.075)
    assert cost_nusd(price, 1_000_000, 0, 0) == 150_000_000
    assert cost_nusd(price, 1000, 500, 400) == 90_000 + 30_000 + 300_000
    assert cost_nusd(Price(input_per_mtok=1.0), 10, 10, 10) == 10_000  # cached at input price
    assert cost_nusd(None, 10, 10, 0) == 0


def test_a_batch_line_costs_less_the_batch_discount() -> None:
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0, batch_discount=0.5)
    assert cost_nusd(price, 1000, 1000, 0) == 3_000_000  # not a batch line: full price
    assert cost_nusd(price, 1000, 1000, 0, batch=True) == 1_500_000
    assert cost_nusd(Price(input_per_mtok=1.0), 1000, 0, 0, batch=True) == 1_000_000


async def test_report_equals_independent_sum_to_the_cent(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        keys = [
            (await gw.team_and_key(f"team{i}", tags={"feature": f"f{i % 2}"}))[2] for i in range(3)
        ]
        expected = Decimal(0)
        for i in range(60):
            status, _, body = await gw.chat(keys[i % 3], max_tokens=5 + i % 7)
            assert status == 200
            expected += _independent_cost(body["usage"], PRICE)
        await gw.tenancy.writer.flush()
        _, report = await gw.admin("GET", "/admin/spend?group_by=team")
        assert sum(r["requests"] for r in report["data"]) == 60
        total = sum(Decimal(r["spend_nusd"]) for r in report["data"]) / Decimal(10**9)
        assert abs(total - expected) < Decimal("0.000001")
        _, by_tag = await gw.admin("GET", "/admin/spend?group_by=tag")
        assert {r["tag"]: r["requests"] for r in by_tag["data"]} == {
            "feature=f0": 40,
            "feature=f1": 20,
        }


async def test_database_outage_loses_and_doubles_nothing(upstream: str, tmp_path: Path) -> None:
    url = await create_pg_database()
    proxy = TcpProxy(5432)
    await proxy.start()
    try:
        proxied = url.replace(":5432/", f":{proxy.port}/")
        async with running_gateway(upstream, tmp_path, proxied) as gw:
            _, _, key = await gw.team_and_key("outage")
            ids = []
            for i in range(90):
                if i == 30:
                    await proxy.cut()
                if i == 60:
                    assert gw.tenancy.writer.pending() > 0  # waiting, not lost
                    await proxy.restore()
                status, headers, _ = await gw.chat(key)
                assert status == 200  # no request fails for the outage
                ids.append(headers["x-request-id"])
                await asyncio.sleep(0.01)
            await proxy.restore()
            for _ in range(100):
                await gw.tenancy.writer.flush()
                if gw.tenancy.writer.pending() == 0:
                    break
                await asyncio.sleep(0.2)
        db = Database.from_url(url, tmp_path, migrations=MIGRATIONS)
        async with db.engine.connect() as conn:
            rows = (await conn.execute(select(spend.c.request_id))).scalars().all()
            audited = await conn.scalar(select(func.count()).select_from(request_audit))
        await db.aclose()
        assert sorted(rows) == sorted(ids)
        assert audited == 90
    finally:
        await proxy.close()
        await drop_pg_database(url)


def _row(rid: str) -> dict[str, Any]:
    return {"request_id": rid, "created_ms": 1, "key_id": "k", "team_id": "t", "alias": "a",
            "deployment": "d", "version": "v", "status": 200, "input_tokens": 1,
            "output_tokens": 1, "cached_tokens": 0, "cost_nusd": 7, "latency_ms": 1,
            "tags": {"env": "x"}}  # fmt: skip


async def test_spool_left_by_a_crash_is_replayed_exactly_once(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    try:
        crashed = RecordWriter(db, tmp_path / "spool")
        for i in range(25):
            crashed.submit("spend", _row(f"r{i}"))
        await crashed.flush()  # 25 written ...
        for i in range(25, 40):
            crashed.submit("spend", _row(f"r{i}"))  # ... 15 only spooled, then the "crash":
        await crash_writer(crashed)  # the process dies: its lock goes, the file stays
        files = list((tmp_path / "spool").glob("seg-*.jsonl"))
        assert len(files) == 1 and len(files[0].read_bytes().splitlines()) == 40
        for _ in range(2):  # two restarts: the second finds nothing more to do
            restarted = RecordWriter(db, tmp_path / "spool")
            await restarted.start()
            await restarted.aclose()
        async with db.engine.connect() as conn:
            count = await conn.scalar(select(func.count()).select_from(spend))
            total = await conn.scalar(select(func.sum(spend.c.cost_nusd)))
        assert (count, total) == (40, 280)
        assert list((tmp_path / "spool").glob("seg-*.jsonl")) == []
    finally:
        await db.aclose()


async def test_a_flush_writes_what_was_queued_and_returns_while_records_keep_coming(
    tmp_path: Path,
) -> None:
    """Under steady traffic a flush must end: it once chased the records arriving during its
    own writes and wrote them two at a time, costing more CPU than the requests themselves."""
    db = Database.from_url(None, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    writer = RecordWriter(db, tmp_path / "spool", batch_size=50)
    writes: list[int] = []
    original = writer._sink._insert

    def counting(records: Sequence[dict[str, Any]]) -> int:  # in the writer's thread
        writes.append(len(records))
        return original(records)

    writer._sink._insert = counting  # type: ignore[method-assign]
    stop = asyncio.Event()

    async def traffic() -> None:
        i = 1000
        while not stop.is_set():
            writer.submit("spend", _row(f"t{i}"))
            i += 1
            await asyncio.sleep(0)

    try:
        for i in range(120):
            writer.submit("spend", _row(f"r{i}"))
        flushing = asyncio.ensure_future(writer.flush())
        feeder = asyncio.ensure_future(traffic())  # starts once the flush awaits its write
        await asyncio.wait_for(flushing, 10)
        assert writes == [50, 50, 20]  # the 120 queued at the start, in full batches
        stop.set()
        await feeder
        assert writer.pending() > 0  # what arrived meanwhile waits for the next flush
        await writer.flush()
        assert writer.pending() == 0
    finally:
        stop.set()
        await writer.aclose()
        await db.aclose()


async def test_budget_stops_at_the_limit_and_alerts_once_each(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook_url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    price = {"input_per_mtok": 1000.0, "output_per_mtok": 4000.0, "cached_input_per_mtok": 500.0}
    try:
        async with running_gateway(
            upstream, tmp_path, db_url, price=price, alert_webhook=hook_url
        ) as gw:
            _, _, key = await gw.team_and_key(
                "capped", team_fields={"max_budget_usd": 1.0, "budget_period": "monthly"}
            )
            costs: list[Decimal] = []
            refused = 0
            for _ in range(10):  # bursts of 4 concurrent requests
                results = await asyncio.gather(*(gw.chat(key, max_tokens=8) for _ in range(4)))
                for status, headers, body in results:
                    if status == 200:
                        costs.append(_independent_cost(body["usage"], price))
                    else:
                        assert status == 429 and body["error"]["code"] == "budget_exceeded"
                        assert int(headers["retry-after"]) > 0
                        refused += 1
                await asyncio.sleep(0.05)  # let settles land
            assert refused > 0
            assert sum(costs) <= Decimal(1) + 4 * max(costs)  # at most the in-flight burst over
            assert sum(costs[:-4]) < Decimal(1)
            for _ in range(50):
                if len(received) >= 3:
                    break
                await asyncio.sleep(0.1)
            async with gw.session.get(gw.url + "/metrics") as resp:
                metrics = await resp.text()
        assert sorted(a["threshold_pct"] for a in received) == [50, 80, 100]
        assert {a["name"] for a in received} == {"capped"}
        line = next(
            x for x in metrics.splitlines() if x.startswith("fleetgate_team_budget_remaining_usd{")
        )
        assert 'team="capped"' in line and float(line.split()[-1]) <= 0
    finally:
        await runner.cleanup()


async def test_a_total_budget_refuses_without_a_retry_time(upstream: str, tmp_path: Path) -> None:
    price = {"input_per_mtok": 1000.0, "output_per_mtok": 4000.0, "cached_input_per_mtok": 500.0}
    async with running_gateway(upstream, tmp_path, None, price=price) as gw:
        _, _, key = await gw.team_and_key("once", max_budget_usd=0.000001, budget_period="total")
        assert (await gw.chat(key))[0] == 200
        await asyncio.sleep(0.2)  # the settle lands
        status, headers, body = await gw.chat(key)
        assert status == 429 and body["error"]["code"] == "budget_exceeded"
        assert "retry-after" not in headers  # it never resets: no time to wait for
        assert "does not reset" in body["error"]["message"]


async def test_the_spool_is_synced_to_disk_off_the_loop_only_when_it_grew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import fleetgate.tenancy.journal as journal

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(journal.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    db = Database.from_url(None, tmp_path, migrations=MIGRATIONS)
    await db.migrate()
    writer = RecordWriter(db, tmp_path / "spool")
    try:
        for i in range(3):
            writer.submit("spend", _row(f"s{i}"))
        await writer._sync()
        await writer._sync()  # nothing new: no second fsync
        assert len(synced) == 1
        seg = writer._current
        assert seg is not None and seg.synced == seg.appended == 3
        writer.submit("spend", _row("s3"))
        await writer._sync()
        assert len(synced) == 2
    finally:
        await writer.aclose()
        await db.aclose()
