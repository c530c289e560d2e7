"""Conversations belong to the key's user (or key) unless the team shares them; the prompt
debug output is for admins only."""

from __future__ import annotations

from typing import Any

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.multimodal.conversations.test_conversation_stage import SYSTEM, _question, _settle


def _config(up: FakeUpstream, scope: str = "user") -> dict[str, Any]:
    cfg = one_alias(up)
    cfg["multimodal"] = {
        "conversations": {"enabled": True, "scope": scope},
        "prompts": {"tiny": {"system_prompt": SYSTEM}},
    }
    return cfg


async def _keys(client: Any, n: int) -> list[dict[str, str]]:
    resp = await client.post("/admin/teams", json={"name": "team"}, headers=AUTH)
    team = (await resp.json())["id"]
    out = []
    for _ in range(n):
        resp = await client.post("/admin/keys", json={"team": team}, headers=AUTH)
        out.append({"Authorization": f"Bearer {(await resp.json())['key']}"})
    return out


async def _ask(client: Any, auth: dict[str, str], i: int, **headers: str) -> Any:
    body = {"model": "tiny", "messages": [{"role": "user", "content": _question(i)}]}
    resp = await client.post(
        "/v1/chat/completions", json=body, headers={**auth, "x-conversation-id": "c1", **headers}
    )
    assert resp.status == 200, await resp.text()
    return resp


async def test_another_key_of_the_team_cannot_read_a_conversation(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    alice, bob = await _keys(client, 2)
    await _ask(client, alice, 1)
    await _settle()
    await _ask(client, bob, 2)
    sent = [m["content"] for m in upstream.seen[-1].body["messages"]]
    assert _question(1) not in sent  # bob starts his own conversation "c1"
    await _settle()
    await _ask(client, alice, 3)
    sent = [m["content"] for m in upstream.seen[-1].body["messages"]]
    assert _question(1) in sent and _question(2) not in sent


async def test_team_scope_shares_conversations_between_keys(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream, scope="team"))
    alice, bob = await _keys(client, 2)
    await _ask(client, alice, 1)
    await _settle()
    await _ask(client, bob, 2)
    sent = [m["content"] for m in upstream.seen[-1].body["messages"]]
    assert _question(1) in sent


async def test_prompt_debug_is_for_the_master_key_only(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    (user,) = await _keys(client, 1)
    resp = await _ask(client, user, 1, **{"x-fleetgate-debug": "prompt"})
    assert "x-fleetgate-prompt" not in resp.headers
    assert "fleetgate_debug" not in await resp.json()
    resp = await _ask(client, AUTH, 2, **{"x-fleetgate-debug": "prompt"})
    assert "x-fleetgate-prompt" in resp.headers
