"""/key/info, /team/info and /spend/logs: LiteLLM's shapes, fleetgate's roles, exact spend."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.tenancy.support import MASTER, STORES, database_for, running_gateway


@pytest.fixture(params=STORES)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database_for(request.param, f"sqlite:///{tmp_path / 'fleetgate.db'}") as url:
        yield url


def _usd(nusd: int) -> float:
    return float(Decimal(nusd) / 10**9)


async def test_key_info_answers_for_the_callers_own_key_and_within_the_team(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team_a, key_a_id, key_a = await gw.team_and_key(
            "a", aliases=["tiny"], rpm=60, max_budget_usd=5, budget_period="monthly",
            tags={"app": "x"},
        )  # fmt: skip
        _, key_b_id, key_b = await gw.team_and_key("b")
        _, mate = await gw.admin("POST", "/admin/keys", json={"team": team_a})
        _, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": team_a, "role": "team_admin"}
        )
        for _ in range(3):
            assert (await gw.chat(key_a))[0] == 200
        await gw.tenancy.writer.flush()
        status, own = await gw.admin("GET", "/key/info", key_a)
        assert status == 200, own
        info = own["info"]
        assert own["key"] == key_a and "token" not in info and key_a not in str(info)
        assert info["team_id"] == team_a and info["team_alias"] == "a"
        assert info["models"] == ["tiny"] and info["rpm_limit"] == 60
        assert info["max_budget"] == 5.0 and info["budget_duration"] == "30d"
        assert info["metadata"] == {"app": "x"} and info["blocked"] is False
        _, spend = await gw.admin("GET", f"/admin/spend?group_by=key&team={team_a}")
        expected = next(r["spend_nusd"] for r in spend["data"] if r["key"] == key_a_id)
        assert expected > 0 and info["spend"] == _usd(expected)
        # by the hash (LiteLLM's token), and by id, as a team admin of the same team
        digest = hashlib.sha256(key_a.encode()).hexdigest()
        for ref in (digest, key_a_id, key_a):
            status, seen = await gw.admin("GET", f"/key/info?key={ref}", admin["key"])
            assert status == 200 and seen["info"]["key_alias"] == key_a_id
        # a user key may not read a team mate's key; nobody but the master another team's
        assert (await gw.admin("GET", f"/key/info?key={key_a_id}", mate["key"]))[0] == 403
        assert (await gw.admin("GET", f"/key/info?key={key_b_id}", admin["key"]))[0] == 404
        assert (await gw.admin("GET", f"/key/info?key={key_b}", key_a))[0] == 404
        assert (await gw.admin("GET", f"/key/info?key={key_b_id}"))[0] == 200
        status, master = await gw.admin("GET", "/key/info")
        assert status == 200 and master["info"]["user_role"] == "proxy_admin"
        assert (await gw.admin("GET", "/key/info", "sk-fg-nobody"))[0] == 401
        assert (await gw.admin("DELETE", f"/admin/keys/{key_a_id}"))[0] == 200
        status, revoked = await gw.admin("GET", f"/key/info?key={key_a_id}")
        assert status == 200 and revoked["info"]["blocked"] is True


async def test_team_info_follows_the_admin_apis_team_rules(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team_a, key_id, key = await gw.team_and_key("a", team_fields={"tpm": 1000})
        team_b, _, _ = await gw.team_and_key("b")
        _, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": team_a, "role": "team_admin"}
        )
        assert (await gw.chat(key))[0] == 200
        await gw.tenancy.writer.flush()
        status, body = await gw.admin("GET", f"/team/info?team_id={team_a}")
        assert status == 200, body
        assert body["team_id"] == team_a and body["team_info"]["team_alias"] == "a"
        assert body["team_info"]["tpm_limit"] == 1000 and body["team_info"]["spend"] > 0
        assert {k["key_alias"] for k in body["keys"]} == {key_id, admin["id"]}
        assert (await gw.admin("GET", "/team/info?team_id=a"))[1]["team_id"] == team_a  # name
        status, own = await gw.admin("GET", "/team/info", admin["key"])  # its own team
        assert status == 200 and own["team_id"] == team_a
        assert (await gw.admin("GET", f"/team/info?team_id={team_b}", admin["key"]))[0] == 404
        assert (await gw.admin("GET", f"/team/info?team_id={team_a}", key))[0] == 403
        assert (await gw.admin("GET", "/team/info"))[0] == 400  # the master names a team


async def test_spend_logs_rows_filters_days_and_roles(
    db_url: str, upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team_a, key_a_id, key_a = await gw.team_and_key("a")
        _, _, key_b = await gw.team_and_key("b")
        _, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": team_a, "role": "team_admin"}
        )
        ids: list[str] = []
        for key in (key_a, key_a, key_b):
            status, headers, _ = await gw.chat(key)
            assert status == 200
            ids.append(headers["x-request-id"])
        a1, a2, b1 = ids
        await gw.tenancy.writer.flush()
        status, rows = await gw.admin("GET", "/spend/logs")
        assert status == 200, rows
        assert sorted(r["request_id"] for r in rows) == sorted(ids)
        one = next(r for r in rows if r["request_id"] == a1)
        assert one["api_key"] == hashlib.sha256(key_a.encode()).hexdigest()
        assert one["model_group"] == "tiny" and one["team_id"] == team_a
        assert one["total_tokens"] == one["prompt_tokens"] + one["completion_tokens"] > 0
        assert one["status"] == "success" and one["spend"] > 0
        # by key (the hash from a row, as LiteLLM dashboards ask) and by request id
        status, mine = await gw.admin("GET", f"/spend/logs?api_key={one['api_key']}")
        assert sorted(r["request_id"] for r in mine) == sorted([a1, a2])
        status, single = await gw.admin("GET", f"/spend/logs?request_id={b1}")
        assert [r["request_id"] for r in single] == [b1]
        # a team admin sees its own team's rows only; a user key none
        status, team_rows = await gw.admin("GET", "/spend/logs", admin["key"])
        assert status == 200 and sorted(r["request_id"] for r in team_rows) == sorted([a1, a2])
        assert (await gw.admin("GET", f"/spend/logs?api_key={key_b}", admin["key"]))[0] == 404
        assert (await gw.admin("GET", "/spend/logs", key_a))[0] == 403
        # per day: the day's spend equals the admin report's, to the nano-dollar
        today = datetime.now(UTC).date().isoformat()
        status, days = await gw.admin("GET", f"/spend/logs?start_date={today}&end_date={today}")
        assert status == 200 and len(days) == 1, days
        _, report = await gw.admin("GET", "/admin/spend?group_by=alias")
        total = sum(r["spend_nusd"] for r in report["data"])
        assert days[0]["spend"] == _usd(total) and set(days[0]["models"]) == {"tiny"}
        assert sum(days[0]["users"].values()) == pytest.approx(days[0]["spend"])
        status, by_key = await gw.admin(
            "GET", f"/spend/logs?start_date={today}&end_date={today}&api_key={key_a_id}"
        )
        assert status == 200 and set(by_key[0]["users"]) == {key_a_id}
        assert (await gw.admin("GET", "/spend/logs?start_date=2024-13-01&end_date=x"))[0] == 400
        assert (await gw.admin("GET", f"/spend/logs?start_date={today}"))[0] == 400
        assert (await gw.admin("GET", "/spend/logs?limit=0"))[0] == 400
        assert len((await gw.admin("GET", "/spend/logs?limit=1"))[1]) == 1


async def test_management_routes_say_503_when_tenancy_is_off(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, None, enabled=False) as gw:
        for path in ("/key/info", "/team/info?team_id=x", "/spend/logs"):
            status, body = await gw.admin("GET", path, MASTER)
            assert status == 503, (path, body)
