"""``POST /admin/keys`` with ``user``: a key acts as (and reads the conversations of) the user it
is bound to, so who may bind whom is checked in the store (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.tenancy.support import Gateway, running_gateway


async def _user(gw: Gateway, team: str, key: str | None = None) -> str:
    kwargs: dict[str, Any] = {"key": key} if key else {}
    status, user = await gw.admin(
        "POST", "/admin/users", json={"team": team, "name": "u"}, **kwargs
    )
    assert status == 201, user
    return str(user["id"])


async def _bind(gw: Gateway, actor: str | None, team: str, user: str, **extra: Any) -> Any:
    kwargs: dict[str, Any] = {"key": actor} if actor else {}
    body = {"team": team, "user": user, **extra}
    return await gw.admin("POST", "/admin/keys", json=body, **kwargs)


async def test_who_may_bind_a_key_to_a_user(db_url: str, upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        team, _, _ = await gw.team_and_key("search")
        other, _, _ = await gw.team_and_key("ads")
        status, admin = await gw.admin(
            "POST", "/admin/keys", json={"team": team, "role": "team_admin"}
        )
        assert status == 201
        admin_key = admin["key"]

        # a user of the key's team only: another team's and made-up names are refused alike
        theirs = await _user(gw, other)
        for user in (theirs, "alice", "user_0123456789abcdef"):
            for actor in (admin_key, None):  # the team admin, the master key
                status, body = await _bind(gw, actor, team, user)
                assert status == 400 and body["error"]["param"] == "user", body

        # a new user's first key comes from the team admin; more keys only from the master key
        carol = await _user(gw, team, admin_key)
        status, first = await _bind(gw, admin_key, team, carol)
        assert status == 201
        status, body = await _bind(gw, admin_key, team, carol)
        assert status == 403 and body["error"]["param"] == "user", body
        assert (await gw.admin("DELETE", f"/admin/keys/{first['id']}", key=admin_key))[0] == 200
        status, body = await _bind(gw, admin_key, team, carol)
        assert status == 403, body  # a revoked key still made carol a user with a history
        status, _ = await _bind(gw, None, team, carol)
        assert status == 201  # the master key may (recorded in the audit log)

        # an admin key that is itself a user's may make more keys for that user
        dave = await _user(gw, team)
        status, dave_admin = await _bind(gw, None, team, dave, role="team_admin")
        assert status == 201
        status, _ = await _bind(gw, dave_admin["key"], team, dave)
        assert status == 201
        status, _ = await _bind(gw, dave_admin["key"], team, carol)
        assert status == 403
