"""Admin API and CLI: keys shown once and stored hashed, roles, every route's team boundary."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from fleetgate.cli.main import main as cli_main
from fleetgate.tenancy.tables import admin_audit, api_keys
from tests.conftest import MASTER as CONFTEST_MASTER
from tests.conftest import GatewayFactory
from tests.tenancy.support import MASTER, running_gateway


async def test_key_is_shown_once_and_stored_hashed(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        _, key_id, key = await gw.team_and_key("ml", aliases=["tiny"], tags={"feature": "chat"})
        assert key.startswith("sk-fg-")
        async with gw.tenancy.db.engine.connect() as conn:
            row = (await conn.execute(select(api_keys).where(api_keys.c.id == key_id))).one()
        assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
        assert key not in json.dumps(row._asdict(), default=str)
        status, listing = await gw.admin("GET", "/admin/keys")
        assert status == 200 and key not in json.dumps(listing)
        assert (await gw.chat(key))[0] == 200
        assert (await gw.chat(key, alias="other"))[0] == 404  # not an allowed alias


async def test_revoked_and_expired_keys_are_refused(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team, key_id, key = await gw.team_and_key("ops")
        status, short = await gw.admin(
            "POST", "/admin/keys", json={"team": team, "expires_at": time.time() + 0.5}
        )
        assert status == 201
        assert (await gw.chat(short["key"]))[0] == 200
        await asyncio.sleep(0.6)
        assert (await gw.chat(short["key"]))[0] == 401
        assert (await gw.admin("DELETE", f"/admin/keys/{key_id}"))[0] == 200
        assert (await gw.chat(key))[0] == 401


async def test_team_admin_is_confined_to_its_team(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team_a, _, user_a = await gw.team_and_key("a")
        team_b, key_b, user_b = await gw.team_and_key("b")
        _, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": team_a, "role": "team_admin"}
        )
        adm = admin["key"]
        assert (await gw.chat(user_a))[0] == 200
        assert (await gw.chat(user_b))[0] == 200
        await gw.tenancy.writer.flush()
        # POST /admin/teams: master only
        assert (await gw.admin("POST", "/admin/teams", adm, json={"name": "c"}))[0] == 403
        # GET /admin/teams: only its own
        status, teams = await gw.admin("GET", "/admin/teams", adm)
        assert status == 200 and [t["id"] for t in teams["data"]] == [team_a]
        assert (await gw.admin("GET", f"/admin/teams/{team_b}", adm))[0] == 404
        assert (await gw.admin("GET", f"/admin/teams/{team_a}", adm))[0] == 200
        # POST /admin/keys: own team yes, other team no, no admin keys
        assert (await gw.admin("POST", "/admin/keys", adm, json={"team": team_a}))[0] == 201
        assert (await gw.admin("POST", "/admin/keys", adm, json={"team": team_b}))[0] == 403
        body = {"team": team_a, "role": "team_admin"}
        assert (await gw.admin("POST", "/admin/keys", adm, json=body))[0] == 403
        # POST /admin/users
        assert (await gw.admin("POST", "/admin/users", adm, json={"team": team_b, "name": "x"}))[
            0
        ] == 403
        assert (await gw.admin("POST", "/admin/users", adm, json={"team": team_a, "name": "x"}))[
            0
        ] == 201
        # GET /admin/keys: own team only
        status, keys = await gw.admin("GET", "/admin/keys", adm)
        assert status == 200 and {k["team_id"] for k in keys["data"]} == {team_a}
        assert (await gw.admin("GET", f"/admin/keys?team={team_b}", adm))[0] == 403
        # DELETE /admin/keys/{id}: another team's key is invisible
        assert (await gw.admin("DELETE", f"/admin/keys/{key_b}", adm))[0] == 404
        assert (await gw.chat(user_b))[0] == 200
        # GET /admin/spend: own team only
        status, spend = await gw.admin("GET", "/admin/spend?group_by=team", adm)
        assert status == 200 and [r["team"] for r in spend["data"]] == [team_a]
        assert (await gw.admin("GET", f"/admin/spend?team={team_b}", adm))[0] == 403
        assert (await gw.admin("GET", "/admin/spend?team=b", adm))[0] == 403  # by name too
        assert (await gw.admin("GET", "/admin/spend?team=nobody", adm))[0] == 403
        status, by_name = await gw.admin("GET", "/admin/spend?team=a", adm)
        assert status == 200 and [r["team"] for r in by_name["data"]] == [team_a]
        status, by_name = await gw.admin("GET", "/admin/spend?group_by=team&team=b")
        assert status == 200 and [r["team"] for r in by_name["data"]] == [team_b]
        assert (await gw.admin("GET", "/admin/spend?team=nobody"))[0] == 404
        status, everything = await gw.admin("GET", "/admin/spend?group_by=team")
        assert {r["team"] for r in everything["data"]} == {team_a, team_b}
        # GET /admin/audit: own team only
        status, audit = await gw.admin("GET", "/admin/audit?kind=request", adm)
        assert status == 200 and {r["team_id"] for r in audit["data"]} == {team_a}
        # admin rows: its own actions and what the master key did to its team, nothing else
        status, audit = await gw.admin("GET", "/admin/audit?kind=admin&limit=1000", adm)
        assert status == 200
        seen = {(r["action"], r["team_id"]) for r in audit["data"]}
        assert ("team.create", team_a) in seen and ("key.create", team_a) in seen
        assert {team for _, team in seen} == {team_a}
        # a plain user key is no admin at all
        assert (await gw.admin("GET", "/admin/keys", user_a))[0] == 403
        assert (await gw.admin("GET", "/admin/spend", user_a))[0] == 403


async def test_every_admin_change_is_audited(db_url: str, upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        _, key_id, _ = await gw.team_and_key("audited")
        await gw.admin("DELETE", f"/admin/keys/{key_id}")
        await gw.admin("GET", "/admin/spend?group_by=key")
        assert (await gw.admin("POST", "/admin/config/reload"))[0] == 400  # no file: refused
        async with gw.tenancy.db.engine.connect() as conn:
            actions = (await conn.execute(select(admin_audit.c.action))).scalars().all()
        assert actions == ["team.create", "key.create", "key.revoke", "spend.read",
                           "config.reload"]  # fmt: skip


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
async def test_cli_teams_keys_spend(
    fmt: str, upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        common = ["--url", gw.url, "--key", MASTER]

        def cli(*args: str) -> str:
            assert cli_main([*args, *common, "-o", fmt]) == 0
            return capsys.readouterr().out

        out = await asyncio.to_thread(cli, "teams", "create", "search", "--rpm", "10")
        assert "search" in out
        out = await asyncio.to_thread(
            cli, "keys", "create", "--team", "search", "--tag", "env=prod"
        )
        assert "sk-fg-" in out
        words = out.replace(",", " ").replace('"', " ").split()
        key = max((w for w in words if w.startswith("sk-fg-")), key=len)  # not the hint
        assert (await gw.chat(key))[0] == 200
        await gw.tenancy.writer.flush()
        out = await asyncio.to_thread(cli, "spend", "--group-by", "team,tag")
        if fmt == "json":
            rows = json.loads(out)
            assert rows[0]["requests"] == 1 and rows[0]["tag"] == "env=prod"
        elif fmt == "csv":
            assert out.splitlines()[0] == "team,tag,spend_usd,requests,input_tokens,output_tokens"
            row = out.splitlines()[1].split(",")
            assert row[1] == "env=prod"
            assert "e" not in row[2] and Decimal(row[2]) > 0  # exact dollars, no exponent
        else:
            assert out.splitlines()[0].split() == [
                "team", "tag", "spend_usd", "requests", "input_tokens", "output_tokens",
            ]  # fmt: skip
        out = await asyncio.to_thread(cli, "keys", "list")
        assert "sk-fg-" in out and key not in out  # only the hint is listed
        out = await asyncio.to_thread(cli, "audit", "--kind", "admin", "--limit", "5")
        assert "key.create" in out and "team.create" in out
        out = await asyncio.to_thread(cli, "audit", "--kind", "request")
        assert "allowed" in out
        await asyncio.to_thread(cli, "teams", "create", "sales & marketing")
        out = await asyncio.to_thread(cli, "keys", "list", "--team", "sales & marketing")
        assert "key_" not in out  # the name travels URL-encoded; the new team has no keys


async def test_full_payloads_only_for_teams_that_ask(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    from fleetgate.tenancy.tables import request_audit

    async with running_gateway(upstream, tmp_path, db_url) as gw:
        _, _, loud = await gw.team_and_key("compliance", team_fields={"log_payloads": True})
        _, _, quiet = await gw.team_and_key("plain")
        status, h_loud, _ = await gw.chat(loud, request_id="client-supplied")
        assert status == 200
        status, h_quiet, _ = await gw.chat(quiet)
        assert status == 200
        body = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": f"Bearer {loud}"}
        async with gw.session.post(
            gw.url + "/v1/chat/completions", json=body, headers=headers
        ) as r:
            streamed = (await r.read()).decode()
            stream_id = r.headers["x-request-id"]
        await gw.tenancy.writer.flush()
        async with gw.tenancy.db.engine.connect() as conn:
            rows = {r.request_id: r for r in (await conn.execute(select(request_audit))).all()}
    # the gateway's own id keys the row, whatever id the client sent
    assert h_loud["x-request-id"] != "client-supplied"
    loud_row, quiet_row = rows[h_loud["x-request-id"]], rows[h_quiet["x-request-id"]]
    assert loud_row.prompt is not None and loud_row.response
    assert quiet_row.prompt is None and quiet_row.response is None
    text = rows[stream_id].response
    assert text and all(word in streamed for word in text.split())


async def test_team_admin_cannot_create_a_key_broader_than_itself(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team, _, _ = await gw.team_and_key("a")
        body = {"team": team, "role": "team_admin", "aliases": ["tiny"]}
        _, admin = await gw.admin("POST", "/admin/keys", json=body)
        adm = admin["key"]
        # no alias list: the new key gets the admin's own list, not every alias
        status, made = await gw.admin("POST", "/admin/keys", adm, json={"team": team})
        assert status == 201
        assert (await gw.chat(made["key"], alias="tiny"))[0] == 200
        assert (await gw.chat(made["key"], alias="other"))[0] == 404
        body = {"team": team, "aliases": ["tiny", "other"]}
        assert (await gw.admin("POST", "/admin/keys", adm, json=body))[0] == 403
        body = {"team": team, "aliases": ["tiny"]}
        assert (await gw.admin("POST", "/admin/keys", adm, json=body))[0] == 201


@pytest.mark.parametrize(
    "path",
    [
        "/admin/spend?since=1e400",
        "/admin/spend?until=-inf",
        "/admin/spend?since=nan",
        "/admin/spend?group_by=team,team",
        "/admin/audit?limit=1e400",
    ],
)
async def test_bad_admin_query_values_are_400_not_500(
    path: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, f"sqlite:///{tmp_path / 'f.db'}") as gw:
        status, body = await gw.admin("GET", path)
        assert status == 400, body


async def test_an_expiry_past_year_9999_is_400(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, f"sqlite:///{tmp_path / 'f.db'}") as gw:
        team, _, _ = await gw.team_and_key("a")
        for expires in (1e300, "1e400", -5):
            body = {"team": team, "expires_at": expires}
            status, out = await gw.admin("POST", "/admin/keys", json=body)
            assert status == 400, out


async def test_a_tag_longer_than_the_store_holds_is_refused_with_a_400(
    upstream: str, tmp_path: Path
) -> None:
    """Every request of such a key carried a tag its spend rows could not store."""
    async with running_gateway(upstream, tmp_path, None) as gw:
        status, team = await gw.admin("POST", "/admin/teams", json={"name": "t"})
        assert status == 201
        for path, body in (
            ("/admin/keys", {"team": team["id"], "tags": {"feature": "x" * 300}}),
            ("/admin/teams", {"name": "u", "tags": {"f" * 300: "y"}}),
        ):
            status, err = await gw.admin("POST", path, json=body)
            assert status == 400 and err["error"]["param"] == "tags", err
        status, _ = await gw.admin(
            "POST", "/admin/keys", json={"team": team["id"], "tags": {"feature": "x" * 290}}
        )
        assert status == 201


async def test_a_limit_beyond_what_the_store_holds_is_a_400(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    """A ``tpm`` over 2**31 - 1 passed the checks and made PostgreSQL refuse the key: a 500."""
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team, _, _ = await gw.team_and_key("a")
        cases = (("tpm", 10**12), ("rpm", 2**31), ("max_budget_usd", 1e300),
                 ("rpm", True), ("max_parallel", False), ("max_budget_usd", True))  # fmt: skip
        for field, value in cases:  # JSON true is not the number 1
            status, out = await gw.admin("POST", "/admin/keys", json={"team": team, field: value})
            assert status == 400 and out["error"]["param"] == field, out
        status, _ = await gw.admin("POST", "/admin/keys", json={"team": team, "tpm": 2**31 - 1})
        assert status == 201


async def test_names_and_user_ids_that_do_not_fit_their_column_are_400_not_500(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    # SQLite stores these; PostgreSQL refused them (a 500). Refused at the edge, naming the
    # field, on both.
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team, _, _ = await gw.team_and_key("a")
        long = "x" * 201
        cases: list[tuple[str, dict[str, object], str]] = [
            ("/admin/teams", {"name": long}, "name"),
            ("/admin/teams", {"name": "a\x00b"}, "name"),
            ("/admin/users", {"team": team, "name": long}, "name"),
            ("/admin/users", {"team": team, "name": "u\x00"}, "name"),
            ("/admin/keys", {"team": team, "user": "u" * 41}, "user"),
            ("/admin/keys", {"team": team, "user": "u\x00"}, "user"),
            ("/admin/keys", {"team": team, "user": {}}, "user"),
            ("/admin/keys", {"team": team, "user": 5}, "user"),
        ]
        for path, body, param in cases:
            status, out = await gw.admin("POST", path, json=body)
            assert status == 400 and out["error"]["param"] == param, (path, body, out)
        status, _ = await gw.admin("POST", "/admin/teams", json={"name": "x" * 200})
        assert status == 201  # the longest that fits


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        ("GET", "/admin/teams/a%00", None, "team"),
        ("GET", "/admin/keys?team=a%00", None, "team"),
        ("GET", "/admin/spend?team=a%00", None, "team"),
        ("DELETE", "/admin/keys/key%00", None, "key_id"),
        ("POST", "/admin/users", {"team": "a\x00", "name": "u"}, "team"),
        ("POST", "/admin/keys", {"team": "a\x00"}, "team"),
    ],
)
async def test_a_team_or_key_named_with_a_nul_is_400_naming_it(
    db_url: str, upstream: str, tmp_path: Path, method: str, path: str, body: object, param: str
) -> None:
    # No store can hold a NUL (PostgreSQL refuses it): refused where it arrives, for any route
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        status, out = await gw.admin(method, path, json=body)
        assert (status, out["error"]["param"]) == (400, param), out


async def test_an_admin_action_on_a_target_longer_than_the_audit_column_is_recorded(
    db_url: str, upstream: str, tmp_path: Path, gateway: GatewayFactory
) -> None:
    # PostgreSQL refused the audit row, so the change was made and the caller got a 500.
    config = {
        "models": [{"alias": "tiny", "deployments": [{"model": "m", "api_base": upstream}]}],
        "safety": {"checks": {"words": {"type": "words"}},
                   "policies": {"default": {"input": ["words"]}}},
    }  # fmt: skip
    client = await gateway(config, database_url=db_url)
    headers = {"Authorization": f"Bearer {CONFTEST_MASTER}"}
    for target in ("x" * 300, "a%00b"):  # names are bounded and NUL-free: 400, not 500
        resp = await client.put(
            f"/admin/safety/aliases/{target}", json={"policy": "default"}, headers=headers
        )
        assert resp.status == 400, await resp.text()
    resp = await client.put(
        f"/admin/safety/aliases/{'y' * 128}", json={"policy": "default"}, headers=headers
    )
    assert resp.status == 200, await resp.text()
    resp = await client.get("/admin/audit", headers=headers)
    targets = [r["target"] for r in (await resp.json())["data"]]
    assert "y" * 128 in targets[0]
    assert all(len(t or "") <= 200 for t in targets)
