"""`fleetgate import litellm-db`: LiteLLM's tables created in the real PostgreSQL from the
``schema.prisma`` that the ``litellm`` wheel ships; a key created there answers through a
real fleetgate gateway after the import, without being re-issued."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.cli.main import main
from tests.fakes import FakeUpstream
from tests.importers.prisma_ddl import model_ddl, schema_text
from tests.tenancy.rollup_check import assert_reports_match_raw
from tests.tenancy.support import create_pg_database, drop_pg_database, running_gateway

MODELS = ("LiteLLM_BudgetTable", "LiteLLM_TeamTable", "LiteLLM_VerificationToken",
          "LiteLLM_SpendLogs")  # fmt: skip
RAW_KEY = "sk-litellm-alpha-0123456789"
OVER_BUDGET_KEY = "sk-litellm-spent-0123456789"
BLOCKED_KEY = "sk-litellm-blocked-012345678"
ONLY_GPT4_KEY = "sk-litellm-gpt4only-01234567"
TEAM = "5e1f0c4e-8a55-4d5b-9c1e-0123456789ab"


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def schema() -> str:
    text = schema_text(Path("/tmp/ll"))
    if text is None:
        pytest.skip("the litellm wheel could not be found or downloaded")
    return text


@pytest.fixture
def databases(schema: str) -> Iterator[tuple[str, str]]:
    """(LiteLLM's database with its tables and rows, fleetgate's empty database)."""
    litellm = asyncio.run(create_pg_database())
    fleetgate = asyncio.run(create_pg_database())
    try:
        asyncio.run(_litellm_rows(litellm, schema))
        yield litellm, fleetgate
    finally:
        asyncio.run(drop_pg_database(litellm))
        asyncio.run(drop_pg_database(fleetgate))


async def _litellm_rows(url: str, schema: str) -> None:
    conn = await asyncpg.connect(url)
    now = datetime.now(UTC).replace(tzinfo=None)
    try:
        for model in MODELS:
            await conn.execute(model_ddl(schema, model))
        await conn.execute(
            'INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget, rpm_limit, created_by, '
            "updated_by) VALUES ('bud-1', 0.001, 50, 'admin', 'admin')"
        )
        await conn.execute(
            'INSERT INTO "LiteLLM_TeamTable" (team_id, team_alias, admins, members, models, '
            "rpm_limit, tpm_limit, max_budget, budget_duration) VALUES "
            "($1, 'search-team', ARRAY['alice'], ARRAY['alice','bob'], ARRAY['tiny','other'], "
            "120, 50000, 25.0, '30d')",
            TEAM,
        )
        insert_key = (
            'INSERT INTO "LiteLLM_VerificationToken" (token, key_name, key_alias, team_id, '
            "user_id, models, rpm_limit, max_budget, budget_duration, blocked, budget_id) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        )
        await conn.execute(insert_key, _hash(RAW_KEY), "sk-...6789", "alpha", TEAM, "alice",
                           [], 60, 10.0, "30d", None, None)  # fmt: skip
        await conn.execute(insert_key, _hash(OVER_BUDGET_KEY), "sk-...spent", "spent", TEAM,
                           "bob", ["tiny"], None, None, None, False, "bud-1")  # fmt: skip
        await conn.execute(insert_key, _hash(BLOCKED_KEY), None, "blocked", None, None, [],
                           None, None, None, True, None)  # fmt: skip
        await conn.execute(insert_key, _hash(ONLY_GPT4_KEY), None, "gpt4", TEAM, None,
                           ["gpt-4"], None, None, None, False, None)  # fmt: skip
        insert_spend = (
            'INSERT INTO "LiteLLM_SpendLogs" (request_id, call_type, api_key, spend, '
            'total_tokens, prompt_tokens, completion_tokens, "startTime", "endTime", model, '
            "model_group, team_id, request_tags, status) VALUES "
            "($1, 'acompletion', $2, $3, $4, $5, $6, $7, $8, 'gpt-4o-mini', 'tiny', $9, $10, "
            "'success')"
        )
        for i in range(30):
            start = now - timedelta(minutes=i)
            await conn.execute(insert_spend, f"chatcmpl-{i:04d}", _hash(RAW_KEY), 0.002, 30, 20,
                               10, start, start + timedelta(milliseconds=400), TEAM,
                               orjson.dumps(["prod"]).decode())  # fmt: skip
        # the budget key already spent more than its budget (0.001 USD) this period
        await conn.execute(insert_spend, "chatcmpl-spent", _hash(OVER_BUDGET_KEY), 0.005, 10,
                           5, 5, now, now, TEAM, "[]")  # fmt: skip
    finally:
        await conn.close()


def _import(litellm: str, fleetgate: str, tmp: Path, capsys: Any) -> str:
    code = main(["import", "litellm-db", litellm, "--database-url", fleetgate,
                 "--data-dir", str(tmp)])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out + out.err


async def _serve_and_check(fleetgate: str, tmp: Path) -> None:
    async with FakeUpstream("up") as up:
        async with running_gateway(f"http://127.0.0.1:{up.port}", tmp, fleetgate) as gw:
            status, _, body = await gw.chat(RAW_KEY)
            assert status == 200, body
            status, _, body = await gw.chat(BLOCKED_KEY)
            assert status == 401, body
            status, _, body = await gw.chat(ONLY_GPT4_KEY)
            assert status in (403, 404), body
            status, _, body = await gw.chat(OVER_BUDGET_KEY)
            assert status == 429 and body["error"]["code"] == "budget_exceeded", body
            status, teams = await gw.admin("GET", "/admin/teams")
            assert status == 200
            team = next(t for t in teams["data"] if t["name"] == "search-team")
            assert team["rpm"] == 120 and team["tpm"] == 50000
            assert team["budget_period"] == "monthly" and team["max_budget_usd"] == 25.0


def test_keys_teams_budgets_and_spend_carry_over(
    databases: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    litellm, fleetgate = databases
    out = _import(litellm, fleetgate, tmp_path, capsys)
    assert "teams: 2, keys: 4, spend records: 31 new of 31 read" in out
    assert "keys without a team" in out
    asyncio.run(_serve_and_check(fleetgate, tmp_path))
    rows = asyncio.run(_fleetgate_rows(fleetgate))
    assert rows["spend"] == (31, 30 * 2_000_000 + 5_000_000)
    # no models of its own: the team's models; alice is a team admin in LiteLLM
    assert rows["alpha"] == (
        "key_ll_" + _hash(RAW_KEY)[:32],
        "team_admin",
        ["tiny", "other"],
        10**10,
    )
    assert rows["spent_aliases"] == ["tiny"]
    # again: nothing duplicated, the same ids updated
    out = _import(litellm, fleetgate, tmp_path, capsys)
    assert "teams: 2, keys: 4, spend records: 0 new of 31 read" in out
    again = asyncio.run(_fleetgate_rows(fleetgate))
    assert again["spend"][0] == 31 and again["counts"] == rows["counts"]
    # the imported history is in the reports' rollup, once, whatever the range
    assert asyncio.run(_reports_match_raw(fleetgate, tmp_path)) > 0


async def _reports_match_raw(url: str, tmp_path: Path) -> int:
    from fleetgate.store.database import Database

    db = Database.from_url(url, tmp_path, migrations=MIGRATIONS)
    try:
        base = int(datetime.now(UTC).timestamp() * 1000) - 2 * 86_400_000
        return await assert_reports_match_raw(db, random.Random(3), n_ranges=4, base_ms=base)
    finally:
        await db.aclose()


async def _fleetgate_rows(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        # the gateway's own spend for the request made above is there too: count LiteLLM's
        spend = await conn.fetchrow(
            "SELECT count(*), sum(cost_nusd) FROM fg_spend WHERE request_id LIKE 'chatcmpl-%'"
        )
        alpha = await conn.fetchrow(
            "SELECT id, role, aliases, max_budget_nusd FROM fg_api_keys WHERE key_hash = $1",
            _hash(RAW_KEY),
        )
        spent = await conn.fetchval(
            "SELECT aliases FROM fg_api_keys WHERE key_hash = $1", _hash(OVER_BUDGET_KEY)
        )
        counts = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM fg_teams), (SELECT count(*) FROM fg_api_keys)"
        )
    finally:
        await conn.close()
    aliases = orjson.loads(alpha["aliases"]) if alpha["aliases"] else None
    return {
        "spend": (spend[0], spend[1]),
        "alpha": (alpha["id"], alpha["role"], aliases, alpha["max_budget_nusd"]),
        "spent_aliases": orjson.loads(spent),
        "counts": tuple(counts),
    }


def test_a_hash_fleetgate_already_holds_is_noted_not_a_crash(
    databases: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key fleetgate issued itself whose hash LiteLLM also holds (the same raw key in both)
    keeps its fleetgate row; the rest of the import goes on."""
    litellm, fleetgate = databases
    asyncio.run(_fleetgate_key(fleetgate, _hash(RAW_KEY)))
    out = _import(litellm, fleetgate, tmp_path, capsys)
    assert "teams: 2, keys: 3, spend records: 31 new of 31 read" in out
    assert "its hash is already a fleetgate key" in out
    assert asyncio.run(_spend_keys(fleetgate)) == {
        "key_own",
        "key_ll_" + _hash(OVER_BUDGET_KEY)[:32],
    }


async def _spend_keys(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        return {r[0] for r in await conn.fetch("SELECT DISTINCT key_id FROM fg_spend")}
    finally:
        await conn.close()


async def _fleetgate_key(url: str, key_hash: str) -> None:
    from fleetgate.store.database import Database

    db = Database.from_url(url, Path("."), migrations=MIGRATIONS)
    try:
        await db.migrate()
    finally:
        await db.aclose()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO fg_teams (id, name, log_payloads, tags, created_ms) "
            "VALUES ('team_own', 'own', false, '{}', 1)"
        )
        await conn.execute(
            "INSERT INTO fg_api_keys (id, key_hash, key_hint, team_id, role, tags, created_ms) "
            "VALUES ('key_own', $1, 'own', 'team_own', 'user', '{}', 1)",
            key_hash,
        )
    finally:
        await conn.close()


def test_bad_url_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"sqlite+aiosqlite:///{tmp_path}/fg.db"
    assert main(["import", "litellm-db", "mysql://x@localhost/db", "--database-url", target]) == 2
    assert "not a PostgreSQL URL" in capsys.readouterr().err
    unreachable = "postgresql://nobody:secret@127.0.0.1:1/litellm"
    assert main(["import", "litellm-db", unreachable, "--database-url", target]) == 2
    err = capsys.readouterr().err
    assert "cannot connect" in err and "secret" not in err
    # a database without LiteLLM's tables
    assert main(["import", "litellm-db", "postgresql://postgres@127.0.0.1:5432/test",
                 "--database-url", target]) == 2  # fmt: skip
    assert "no table LiteLLM_TeamTable" in capsys.readouterr().err


def test_prisma_schema_parameter_and_other_url_parts() -> None:
    from fleetgate.importers.litellm_db import litellm_dsn

    dsn, schema = litellm_dsn("postgresql://u:p@db:5432/litellm?schema=proxy&sslmode=disable")
    assert (dsn, schema) == ("postgresql://u:p@db:5432/litellm?sslmode=disable", "proxy")
    assert litellm_dsn("postgres://u@db/litellm") == ("postgresql://u@db/litellm", None)


NEW_KEY = "sk-litellm-added-later-0123456"


def test_a_reimport_never_loosens_and_running_gateways_see_new_keys_at_once(
    databases: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Between two imports an operator revokes a key, lowers a budget and narrows an
    allowlist in fleetgate, and LiteLLM gets a new key. The re-import leaves fleetgate's
    changes as they are and a gateway following Redis takes the new key without a restart."""
    litellm, fleetgate = databases
    _import(litellm, fleetgate, tmp_path, capsys)
    asyncio.run(_reimport_under_a_running_gateway(litellm, fleetgate, tmp_path))
    out = capsys.readouterr()
    assert "a re-import never loosens" in out.err
    row = asyncio.run(_key_row(fleetgate, _hash(RAW_KEY)))
    assert row["revoked_ms"] is not None
    assert row["max_budget_nusd"] == 10**9 and orjson.loads(row["aliases"]) == ["tiny"]


async def _reimport_under_a_running_gateway(litellm: str, fleetgate: str, tmp: Path) -> None:
    from tests.tenancy.support import REDIS_URL, wait_for

    prefix = f"fgtest{random.randrange(10**9)}:"
    kid = "key_ll_" + _hash(RAW_KEY)[:32]
    conn = await asyncpg.connect(fleetgate)
    try:  # lowered and narrowed in fleetgate (no admin route edits these)
        await conn.execute(
            "UPDATE fg_api_keys SET max_budget_nusd = $1, aliases = $2 WHERE id = $3",
            10**9, '["tiny"]', kid,
        )  # fmt: skip
    finally:
        await conn.close()
    async with FakeUpstream("up") as up:
        async with running_gateway(
            f"http://127.0.0.1:{up.port}", tmp, fleetgate, REDIS_URL, redis_prefix=prefix
        ) as gw:
            await wait_for(_feed_up(gw))
            assert (await gw.chat(RAW_KEY))[0] == 200
            status, _ = await gw.admin("DELETE", f"/admin/keys/{kid}")
            assert status == 200
            assert (await gw.chat(RAW_KEY))[0] == 401
            await _litellm_new_key(litellm)
            code = await asyncio.to_thread(
                main, ["import", "litellm-db", litellm, "--database-url", fleetgate,
                       "--data-dir", str(tmp), "--no-spend", "--redis-url", REDIS_URL,
                       "--redis-prefix", prefix],
            )  # fmt: skip
            assert code == 0

            async def new_key_works() -> bool:
                return (await gw.chat(NEW_KEY))[0] == 200

            await wait_for(new_key_works, timeout=3.0)  # the poll is off while Redis is up
            assert (await gw.chat(RAW_KEY))[0] == 401


def _feed_up(gw: Any) -> Any:
    async def up() -> bool:
        return bool(gw.tenancy.sync.feed_up)

    return up


async def _litellm_new_key(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            'INSERT INTO "LiteLLM_VerificationToken" (token, key_alias, team_id, models) '
            "VALUES ($1, 'added', $2, ARRAY[]::text[])",
            _hash(NEW_KEY), TEAM,
        )  # fmt: skip
    finally:
        await conn.close()


async def _key_row(url: str, key_hash: str) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchrow("SELECT * FROM fg_api_keys WHERE key_hash = $1", key_hash)
    finally:
        await conn.close()
