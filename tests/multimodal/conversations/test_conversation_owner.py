"""A user's stored conversation is read only by keys bound to that user: a team admin cannot
make itself a key that acts as one of its team's users, nor any key that acts as another
team's user, to read the turns through ``x-conversation-id`` (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.multimodal.conversations.test_conversation_stage import SYSTEM, _question, _settle
from tests.tenancy.conftest import db_url

__all__ = ["db_url"]


def _config(up: FakeUpstream) -> dict[str, Any]:
    cfg = one_alias(up)
    cfg["multimodal"] = {
        "conversations": {"enabled": True},
        "prompts": {"tiny": {"system_prompt": SYSTEM}},
    }
    return cfg


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _post(client: Any, path: str, body: dict[str, Any], auth: dict[str, str]) -> Any:
    resp = await client.post(path, json=body, headers=auth)
    return resp.status, await resp.json()


async def _team(client: Any, name: str) -> tuple[str, str, dict[str, str]]:
    """A team, one user of it and the team's admin key: (team id, user id, admin auth)."""
    status, team = await _post(client, "/admin/teams", {"name": name}, AUTH)
    assert status == 201, team
    status, user = await _post(client, "/admin/users", {"team": team["id"], "name": "u"}, AUTH)
    assert status == 201, user
    body = {"team": team["id"], "role": "team_admin"}
    status, admin = await _post(client, "/admin/keys", body, AUTH)
    assert status == 201, admin
    return team["id"], user["id"], _bearer(admin["key"])


async def _ask(client: Any, up: FakeUpstream, auth: dict[str, str], i: int) -> list[Any]:
    """Ask question ``i`` in conversation "c1"; the messages the upstream was sent."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": _question(i)}]}
    resp = await client.post(
        "/v1/chat/completions", json=body, headers={**auth, "x-conversation-id": "c1"}
    )
    assert resp.status == 200, await resp.text()
    await _settle()
    return [m["content"] for m in up.seen[-1].body["messages"]]


async def _gateway(gateway: GatewayFactory, upstream: FakeUpstream, db_url: str) -> Any:
    return await gateway(_config(upstream), database_url=db_url)


async def test_a_team_admin_cannot_make_a_key_that_reads_its_users_conversation(
    gateway: GatewayFactory, upstream: FakeUpstream, db_url: str
) -> None:
    client = await _gateway(gateway, upstream, db_url)
    team, alice, admin = await _team(client, "search")
    status, key = await _post(client, "/admin/keys", {"team": team, "user": alice}, AUTH)
    assert status == 201
    await _ask(client, upstream, _bearer(key["key"]), 1)  # alice's conversation "c1"

    status, body = await _post(client, "/admin/keys", {"team": team, "user": alice}, admin)
    assert status == 403 and body["error"]["param"] == "user", body
    assert "key" not in body
    # every key the admin may still make starts a conversation "c1" of its own
    status, own = await _post(client, "/admin/keys", {"team": team}, admin)
    assert status == 201
    assert _question(1) not in await _ask(client, upstream, _bearer(own["key"]), 2)
    assert _question(1) in await _ask(
        client, upstream, _bearer(key["key"]), 3
    )  # alice still reads hers


async def test_a_key_binds_only_a_user_of_its_own_team(
    gateway: GatewayFactory, upstream: FakeUpstream, db_url: str
) -> None:
    client = await _gateway(gateway, upstream, db_url)
    team_a, _, admin_a = await _team(client, "search")
    team_b, bob, _ = await _team(client, "ads")
    status, key = await _post(client, "/admin/keys", {"team": team_b, "user": bob}, AUTH)
    assert status == 201
    await _ask(client, upstream, _bearer(key["key"]), 1)  # bob's conversation "c1" in team ads

    for actor in (admin_a, AUTH):  # neither a team admin nor the master key
        for user in (bob, "bob", "user_0000000000000000"):  # another team's, no one's
            status, body = await _post(client, "/admin/keys", {"team": team_a, "user": user}, actor)
            assert status == 400 and body["error"]["param"] == "user", body
            assert body["error"]["type"] == "invalid_request_error"
    # another team's user and an unknown name get the same answer: nothing is told about bob
    _, told = await _post(client, "/admin/keys", {"team": team_a, "user": bob}, admin_a)
    _, unknown = await _post(client, "/admin/keys", {"team": team_a, "user": "bob"}, admin_a)
    assert told["error"]["message"].replace(bob, "X") == unknown["error"]["message"].replace(
        "bob", "X"
    )


async def test_an_admin_onboards_a_new_user_and_the_master_key_adds_keys(
    gateway: GatewayFactory, upstream: FakeUpstream, db_url: str
) -> None:
    client = await _gateway(gateway, upstream, db_url)
    team, _, admin = await _team(client, "search")
    status, carol = await _post(client, "/admin/users", {"team": team, "name": "carol"}, admin)
    assert status == 201
    status, first = await _post(client, "/admin/keys", {"team": team, "user": carol["id"]}, admin)
    assert status == 201  # a user without any key yet: the key handed over on onboarding
    await _ask(client, upstream, _bearer(first["key"]), 1)
    status, second = await _post(client, "/admin/keys", {"team": team, "user": carol["id"]}, AUTH)
    assert status == 201  # the master key may bind more keys to a user (its choice, audited)
    assert _question(1) in await _ask(client, upstream, _bearer(second["key"]), 2)  # the same user
    resp = await client.get("/admin/audit?kind=admin", headers=AUTH)
    rows = (await resp.json())["data"]
    created = [r for r in rows if r["action"] == "key.create" and r["target"] == second["id"]]
    assert created and created[0]["detail"]["user"] == carol["id"]
