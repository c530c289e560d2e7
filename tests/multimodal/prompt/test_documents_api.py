"""Team documents uploaded through the admin API end up as retrieved context in the prompt,
for that team only."""

from __future__ import annotations

from typing import Any

from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

HANDBOOK = (
    "Vacation policy: every employee of ACME gets 27 paid vacation days per year. "
    "Unused days carry over until March."
)


async def _team_key(client: Any, name: str, role: str = "user") -> tuple[str, str]:
    team = await (await client.post("/admin/teams", json={"name": name}, headers=AUTH)).json()
    key = await (
        await client.post("/admin/keys", json={"team": team["id"], "role": role}, headers=AUTH)
    ).json()
    return team["id"], key["key"]


async def test_uploaded_document_is_retrieved_for_its_team_only(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    cfg = one_alias(upstream)
    cfg["multimodal"] = {"prompts": {"tiny": {"retrieval": {"top_k": 1, "min_score": 0.2}}}}
    client = await gateway(cfg)
    team_a, key_a = await _team_key(client, "acme")
    team_b, key_b = await _team_key(client, "other")
    _, admin_b = await _team_key(client, "third", role="team_admin")

    url = f"/admin/teams/{team_a}/documents/handbook"
    assert (
        await client.put(
            url, json={"text": HANDBOOK}, headers={"Authorization": f"Bearer {admin_b}"}
        )
    ).status == 403
    assert (await client.put(url, json={"text": ""}, headers=AUTH)).status == 400
    resp = await client.put(url, json={"text": HANDBOOK}, headers=AUTH)
    assert resp.status == 200 and (await resp.json())["chunks"] >= 1

    question = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "How many vacation days do I get?"}],
    }
    for key in (key_a, key_b):
        resp = await client.post(
            "/v1/chat/completions", json=question, headers={"Authorization": f"Bearer {key}"}
        )
        assert resp.status == 200, await resp.text()
    sent_a, sent_b = (str(s.body["messages"]) for s in upstream.seen[-2:])
    assert "27 paid vacation days" in sent_a
    assert "27 paid vacation days" not in sent_b  # another team's collection stays apart

    assert (await client.delete(url, headers=AUTH)).status == 200
    await client.post(
        "/v1/chat/completions", json=question, headers={"Authorization": f"Bearer {key_a}"}
    )
    assert "27 paid vacation days" not in str(upstream.seen[-1].body["messages"])


async def test_a_team_over_its_document_budget_gets_413_and_other_teams_are_unaffected(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    cfg = one_alias(upstream)
    cfg["multimodal"] = {
        "inputs": {"team_document_bytes": 300, "team_documents": 3, "document_chars": 250}
    }
    client = await gateway(cfg)
    team_a, _ = await _team_key(client, "acme")
    team_b, _ = await _team_key(client, "other")

    def put(team: str, doc: str, text: str) -> Any:
        return client.put(f"/admin/teams/{team}/documents/{doc}", json={"text": text}, headers=AUTH)

    too_long = await put(team_a, "long", "word " * 60)
    assert too_long.status == 400 and (await too_long.json())["error"]["param"] == "text"
    assert (await put(team_a, "one", "a" * 200)).status == 200
    full = await put(team_a, "two", "b" * 200)  # 400 bytes in all: over the 300
    assert full.status == 413
    assert (await full.json())["error"]["code"] == "team_documents_full"
    assert (await put(team_a, "one", "c" * 250)).status == 200  # replacing counts once
    assert (await put(team_b, "two", "b" * 200)).status == 200  # per team
    for doc in ("x", "y"):
        assert (await put(team_b, doc, "small")).status == 200
    too_many = await put(team_b, "z", "small")
    assert too_many.status == 413 and "documents" in (await too_many.json())["error"]["message"]
    assert (await client.delete(f"/admin/teams/{team_b}/documents/x", headers=AUTH)).status == 200
    assert (await put(team_b, "z", "small")).status == 200  # deleting frees room
