"""Each route group called as each role, against the one table of what a role may do
(`fleetgate.contract.principal.ROLE_ACTIONS`) and docs/console.md's roles: a finance viewer
reads every team's spend (the admin API's too) and nothing else; it calls no model or MCP
tool and touches no file, batch, stored response or feedback (finding 12 of #31)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from fleetgate.config.schema import GatewayConfig
from fleetgate.contract.principal import ROLE_ACTIONS, Principal
from tests.console.support import MASTER, Console, console_config, running_console
from tests.fakes import FakeUpstream

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
ROLES = ("master", "team_admin", "finance_viewer", "user")
CALLERS = ("master", "team_admin", "user")
EVERYONE_BUT_USER = ("master", "team_admin", "finance_viewer")
ADMINS = ("master", "team_admin")

# (method, path, body, roles allowed): a role not allowed gets a 403; an allowed one gets
# neither 401 nor 403 (what comes next, 200 or a 404 for an unknown id, is the route's).
TABLE: list[tuple[str, str, dict[str, Any] | None, tuple[str, ...]]] = [
    ("POST", "/v1/chat/completions", CHAT, CALLERS),
    ("POST", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2}, CALLERS),
    ("POST", "/v1/messages", {**CHAT, "max_tokens": 4}, CALLERS),
    ("POST", "/v1/messages/count_tokens", CHAT, CALLERS),
    ("POST", "/v1/responses", {"model": "tiny", "input": "hi"}, CALLERS),
    ("GET", "/v1/responses/resp_nope", None, CALLERS),
    ("DELETE", "/v1/responses/resp_nope", None, CALLERS),
    ("POST", "/mcp", MCP_LIST, CALLERS),
    ("GET", "/v1/files", None, CALLERS),
    ("GET", "/v1/files/file-nope/content", None, CALLERS),
    ("GET", "/v1/batches", None, CALLERS),
    ("POST", "/v1/batches/batch_nope/cancel", None, CALLERS),
    ("POST", "/v1/feedback", {"request_id": "req-nope", "rating": "up"}, CALLERS),
    ("GET", "/admin/spend", None, EVERYONE_BUT_USER),
    ("GET", "/admin/spend?group_by=team,alias", None, EVERYONE_BUT_USER),
    ("GET", "/admin/spend?team=ads", None, ("master", "finance_viewer")),
    ("GET", "/admin/teams", None, ADMINS),
    ("GET", "/admin/keys", None, ADMINS),
    ("GET", "/admin/audit", None, ADMINS),
    ("GET", "/admin/spend/dead-letters", None, ("master",)),
]


def test_the_role_table() -> None:
    assert set(ROLE_ACTIONS) == set(ROLES)
    finance = Principal("k", role="finance_viewer", team_id="t")
    assert finance.may("spend_all") and not finance.may("call") and not finance.may("manage")
    assert not finance.may_use("tiny")
    assert Principal("k", role="team_admin").may("spend")
    assert not Principal("k", role="team_admin").may("spend_all")
    assert not Principal("k").may("spend") and Principal("k").may_use("tiny")


async def _keys(c: Console) -> dict[str, str]:
    keys = {"master": MASTER}
    for name in ("search", "ads"):
        status, team = await c.admin("POST", "/admin/teams", json={"name": name})
        assert status == 201, team
    for role in ("team_admin", "finance_viewer", "user"):
        body = {"team": "search", "role": role}
        status, key = await c.admin("POST", "/admin/keys", json=body)
        assert status == 201, key
        keys[role] = key["key"]
    return keys


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Console]:
    async with FakeUpstream() as fake, _served(fake, tmp_path) as c:
        yield c


@asynccontextmanager
async def _served(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[Console]:
    config = console_config(fake.url).model_dump(mode="json", exclude_unset=True)
    config["mcp"] = {"servers": {"notes": {"transport": "http", "url": "http://127.0.0.1:9/mcp"}}}

    async with running_console(
        fake.url, tmp_path, config=GatewayConfig.model_validate(config)
    ) as c:
        yield c


async def test_each_route_group_as_each_role(gateway: Console) -> None:
    c = gateway
    keys = await _keys(c)
    wrong = []
    for method, path, body, allowed in TABLE:
        for role in ROLES:
            headers = {"Authorization": f"Bearer {keys[role]}",
                       "Accept": "application/json, text/event-stream"}  # fmt: skip
            async with c.http.request(method, c.url + path, json=body, headers=headers) as resp:
                await resp.read()
                ok = resp.status not in (401, 403) if role in allowed else resp.status == 403
                if not ok:
                    wrong.append(f"{method} {path} as {role}: {resp.status}")
    assert wrong == []


async def test_a_finance_viewer_lists_no_model_and_reads_every_teams_spend(
    gateway: Console,
) -> None:
    c = gateway
    keys = await _keys(c)
    status, models = await c.admin("GET", "/v1/models", keys["finance_viewer"])
    assert status == 200 and models["data"] == []
    status, models = await c.admin("GET", "/v1/models", keys["user"])
    assert status == 200 and {m["id"] for m in models["data"]} == {"tiny", "other"}
    assert await c.chat(keys["user"]) == 200
    status, spend = await c.admin("GET", "/admin/spend?group_by=team", keys["finance_viewer"])
    assert status == 200 and "data" in spend
    status, err = await c.admin("GET", "/admin/spend?team=nope", keys["finance_viewer"])
    assert status == 404, err  # an unknown team, as for the master (a team admin gets 403)
