"""``fleetgate reconcile``: a month of spend in the store (SQLite and PostgreSQL) against
provider exports that agree with it except on known days, which are exactly the days flagged."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import insert

from fleetgate.app import MIGRATIONS
from fleetgate.cli.main import main
from fleetgate.store import Database
from fleetgate.tenancy.tables import spend

MONTH = [date(2026, 6, 1) + timedelta(days=i) for i in range(30)]
CONFIG = {
    "models": [
        {"alias": "chat", "deployments": [
            {"provider": "openai", "model": "gpt-4o", "name": "oa-4o",
             "api_base": "https://api.openai.com/v1"},
            {"provider": "openai", "model": "gpt-4o-mini",
             "api_base": "https://api.openai.com/v1"}]},  # id chat/1
        {"alias": "claude", "deployments": [
            {"provider": "anthropic", "model": "claude-sonnet-4",
             "api_base": "https://api.anthropic.com"}]},
        {"alias": "local", "deployments": [  # speaks OpenAI's protocol, not on OpenAI's bill
            {"provider": "openai", "model": "qwen", "api_base": "http://127.0.0.1:8/v1"}]},
    ]
}  # fmt: skip
# deployment id -> the model the provider bills
BILLED = {"oa-4o": "gpt-4o", "chat/1": "gpt-4o-mini", "claude/0": "claude-sonnet-4"}


async def _month_of_spend(url: str | None, data_dir: Path) -> dict[tuple[date, str], int]:
    """Random spend rows (several per day and deployment, at random times of the UTC day);
    the truth in nano-dollars per (day, billed model)."""
    rng = random.Random(5)
    truth: dict[tuple[date, str], int] = {}
    rows: list[dict[str, Any]] = []
    for day in MONTH:
        start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
        for dep, model in [*BILLED.items(), ("local/0", "qwen")]:
            for _ in range(rng.randint(3, 9)):
                nusd = rng.randint(1_000_000, 900_000_000)  # $0.001 .. $0.90
                rows.append({
                    "request_id": f"r{len(rows)}", "created_ms": start + rng.randrange(86_400_000),
                    "key_id": "k1", "team_id": "t1", "alias": dep.split("/")[0], "deployment": dep,
                    "status": 200, "input_tokens": 10, "output_tokens": 10, "cached_tokens": 0,
                    "cost_nusd": nusd, "latency_ms": 100, "tags": {},
                })  # fmt: skip
                truth[(day, model)] = truth.get((day, model), 0) + nusd
    db = Database.from_url(url, data_dir, migrations=MIGRATIONS)
    try:
        await db.migrate()
        async with db.engine.begin() as conn:
            await conn.execute(insert(spend), rows)
    finally:
        await db.aclose()
    return truth


def _openai_pages(truth: dict[tuple[date, str], float]) -> list[dict[str, Any]]:
    """The Costs API's pages (group_by=line_item), 15 daily buckets each; each model's cost
    split into input and output line items; gpt-4o billed under a dated snapshot name."""
    buckets = []
    for day in MONTH:
        start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())
        results = []
        for model in ("gpt-4o", "gpt-4o-mini"):
            usd = truth.get((day, model), 0.0)
            name = "gpt-4o-2024-08-06" if model == "gpt-4o" else model
            for part, share in (("input", 0.3), ("output", 0.7)):
                results.append({"object": "organization.costs.result",
                                "amount": {"value": usd * share, "currency": "usd"},
                                "line_item": f"{name}, {part}", "project_id": None})  # fmt: skip
        buckets.append({"object": "bucket", "start_time": start, "end_time": start + 86400,
                        "results": results})  # fmt: skip
    return [{"object": "page", "data": buckets[i : i + 15], "has_more": i == 0} for i in (0, 15)]


def _run(bill: Path, provider: str, url: str | None, tmp_path: Path, *more: str) -> int:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    args = ["reconcile", str(bill), "--provider", provider, "--config", str(config),
            "--data-dir", str(tmp_path), "-o", "json", *more]  # fmt: skip
    if url is not None:
        args += ["--database-url", url]
    return main(args)


async def test_exactly_the_days_that_differ_are_flagged(
    database_url: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = {k: v / 1e9 for k, v in (await _month_of_spend(database_url, tmp_path)).items()}
    bill = dict(truth)
    bill[(MONTH[6], "gpt-4o")] += 1.50  # a client used the provider key around the gateway
    bill[(MONTH[18], "gpt-4o-mini")] *= 0.9  # the config's price is 10% too high
    for key in bill:  # the provider's rounding: within the tolerance
        bill[key] = round(bill[key], 4)
    path = tmp_path / "openai-costs.json"
    path.write_text(json.dumps(_openai_pages(bill)))
    capsys.readouterr()
    assert await _in_thread(_run, path, "openai", database_url, tmp_path) == 1
    rows = json.loads(capsys.readouterr().out)
    assert {(r["day"], r["model"]) for r in rows if r["flagged"]} == {
        ("2026-06-07", "gpt-4o"), ("2026-06-19", "gpt-4o-mini")}  # fmt: skip
    assert len(rows) == 60  # every day, both OpenAI models; no Anthropic or local spend
    diff = next(r for r in rows if r["flagged"] and r["model"] == "gpt-4o")
    assert diff["diff_usd"] == pytest.approx(-1.50, abs=1e-3)

    # Anthropic's cost report: amounts in cents as decimal strings; one day missing a charge.
    report = {"data": [], "has_more": False, "next_page": None}
    for day in MONTH:
        cents = truth[(day, "claude-sonnet-4")] * 100 + (250 if day == MONTH[25] else 0)
        report["data"].append({  # type: ignore[attr-defined]
            "starting_at": f"{day.isoformat()}T00:00:00Z",
            "ending_at": f"{(day + timedelta(days=1)).isoformat()}T00:00:00Z",
            "results": [{"currency": "USD", "amount": f"{cents:.4f}", "model": "claude-sonnet-4",
                         "cost_type": "tokens", "token_type": "output_tokens",
                         "description": "Claude Sonnet 4 Usage - Output Tokens"}]})  # fmt: skip
    path = tmp_path / "cost_report.json"
    path.write_text(json.dumps(report))
    assert await _in_thread(_run, path, "anthropic", database_url, tmp_path) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["day"], r["model"]) for r in rows if r["flagged"]] == [
        ("2026-06-26", "claude-sonnet-4")]  # fmt: skip


async def _in_thread(fn: Any, *args: Any) -> int:
    """The CLI runs its own event loop: run it off this test's loop."""
    import asyncio

    return int(await asyncio.to_thread(fn, *args))


async def test_a_bill_that_agrees_exits_zero_and_a_csv_bill_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = await _month_of_spend(None, tmp_path)
    lines = ["date,model,cost_usd"]
    for (day, model), nusd in sorted(truth.items()):
        if model in ("gpt-4o", "gpt-4o-mini"):
            lines.append(f"{day.isoformat()},{model},{nusd / 1e9:.6f}")
    path = tmp_path / "bill.csv"
    path.write_text("\n".join(lines) + "\n")
    assert await _in_thread(_run, path, "openai", None, tmp_path, "-o", "table") == 0
    out = capsys.readouterr().out
    assert "0 of 60 day/model rows differ" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "neither JSON"),
        ('{"data": [{"nothing": 1}]}', "neither start_time"),
        ('{"data": [{"start_time": 1, "results": [{"amount": {}}]}]}', "amount.value"),
        ("day,model\n2026-06-01,x\n", "columns date, model and cost_usd"),
        ("date,model,cost_usd\nyesterday,x,1\n", "not a date"),
        ("date,model,cost_usd\n2026-06-01,x,lots\n", "not a number"),
    ],
)
async def test_a_bad_bill_is_a_clear_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "bill"
    path.write_text(content)
    assert await _in_thread(_run, path, "openai", None, tmp_path) == 2
    assert message in capsys.readouterr().err
