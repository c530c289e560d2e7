"""Document sets: an upload prewarms the set on a chosen engine, the team's retrieval request is
routed there and finds it cached, and hit rates are reported by tenant and document set."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from tests.conftest import AUTH, GatewayFactory

from fleetgate.multimodal.document_kv import MAX_PENDING, DocumentKv
from fleetgate.multimodal.prompt.config import PromptConfig
from fleetgate.multimodal.prompt.retrieval import DocumentSet
from fleetgate.sim import SimConfig, running_sim
from fleetgate.telemetry.registry import Registry

SIM = SimConfig(model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.1, output_len=2)
HANDBOOK = "\n\n".join(
    f"Rule {i}: every employee of ACME follows guideline number {i} without fail."
    for i in range(60)
)


async def _team_key(client: Any, name: str, role: str = "user") -> tuple[str, str]:
    team = await (await client.post("/admin/teams", json={"name": name}, headers=AUTH)).json()
    key = await (
        await client.post("/admin/keys", json={"team": team["id"], "role": role}, headers=AUTH)
    ).json()
    return team["id"], key["key"]


async def _kv(client: Any, team: str) -> dict[str, Any]:
    resp = await client.get(f"/admin/documents/kv?team={team}", headers=AUTH)
    assert resp.status == 200, await resp.text()
    data = (await resp.json())["data"]
    assert len(data) == 1
    return dict(data[0])


async def _settled(client: Any, team: str, alias: str) -> dict[str, Any]:
    for _ in range(200):  # bounded: 10 s
        entry = await _kv(client, team)
        state = entry["prewarm"].get(alias, {}).get("state")
        if state not in (None, "queued", "running"):
            return entry
        await asyncio.sleep(0.05)
    raise AssertionError(f"prewarm of {team} did not finish: {entry}")


def _config(urls: list[str], *, replicas: int = 1, strategy: str = "kv-aware") -> dict[str, Any]:
    return {
        "models": [{"alias": "docs", "strategy": strategy, "deployments": [
            {"model": "m", "api_base": f"{u}/v1", "name": f"e{i}"} for i, u in enumerate(urls)]}],
        "routing": {"scrape_interval_s": 0.05},
        "multimodal": {"prompts": {"docs": {
            "system_prompt": "You answer from ACME's handbook.",
            "retrieval": {"mode": "document_set", "prewarm_replicas": replicas}}}},
    }  # fmt: skip


async def test_an_upload_prewarms_one_engine_and_the_first_request_is_routed_there(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(running_sim(SIM)) for _ in range(3)]
        client = await gateway(_config(urls))
        team, key = await _team_key(client, "acme")
        resp = await client.put(
            f"/admin/teams/{team}/documents/handbook", json={"text": HANDBOOK}, headers=AUTH
        )
        assert resp.status == 200, await resp.text()
        entry = await _settled(client, team, "docs")
        warm = entry["prewarm"]["docs"]
        assert warm["state"] == "warmed", warm
        warmed = [e["deployment"] for e in warm["engines"] if e["warmed"]]
        assert len(warmed) == 1

        question = {"role": "user", "content": "May I bring a dog to work?"}
        body = {"model": "docs", "max_tokens": 2, "messages": [question]}
        user = {"Authorization": f"Bearer {key}"}
        resp = await client.post("/v1/chat/completions", json=body, headers=user)
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        assert resp.headers["x-fleetgate-deployment"] == warmed[0]
        usage = answer["usage"]
        # everything but the question's own blocks came from the prewarmed cache
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0.9 * usage["prompt_tokens"]

        entry = await _kv(client, team)
        assert entry["tenant"] == team and entry["document_set"] == team
        assert entry["requests"] == 1 and entry["first_request"]["hit_rate"] > 0.9
        assert entry["hit_rate"] == entry["first_request"]["hit_rate"]
        metrics = await (await client.get("/metrics")).text()
        assert (
            f'fleetgate_document_kv_requests_total{{tenant="{team}",document_set="{team}"}} 1'
            in (metrics)
        )
        assert 'fleetgate_document_prewarms_total{result="warmed"} 1' in metrics

        # another team never reads the set: its admin is refused, the master sees both
        other, other_admin = await _team_key(client, "other", role="team_admin")
        resp = await client.get(
            f"/admin/documents/kv?team={team}", headers={"Authorization": f"Bearer {other_admin}"}
        )
        assert resp.status == 403
        resp = await client.get("/admin/documents/kv", headers={"Authorization": f"Bearer {key}"})
        assert resp.status == 403


async def test_without_prewarm_the_first_request_is_cold(gateway: GatewayFactory) -> None:
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(running_sim(SIM)) for _ in range(2)]
        client = await gateway(_config(urls, replicas=0))
        team, key = await _team_key(client, "acme")
        resp = await client.put(
            f"/admin/teams/{team}/documents/handbook", json={"text": HANDBOOK}, headers=AUTH
        )
        assert resp.status == 200
        question = {"role": "user", "content": "May I bring a dog to work?"}
        body = {"model": "docs", "max_tokens": 2, "messages": [question]}
        user = {"Authorization": f"Bearer {key}"}
        for question in ("May I bring a dog to work?", "And a cat?"):
            body["messages"] = [{"role": "user", "content": question}]
            resp = await client.post("/v1/chat/completions", json=body, headers=user)
            assert resp.status == 200, await resp.text()
        entry = await _kv(client, team)
        assert entry["prewarm"] == {}
        assert entry["first_request"]["cached_tokens"] == 0  # cold: nothing sent ahead
        assert entry["requests"] == 2 and 0.3 < entry["hit_rate"] < 0.55  # the second was warm


def _set(team: str, version: int) -> DocumentSet:
    return DocumentSet(team, version, (("d", ("text",)),))


def test_hit_rates_are_kept_per_tenant_and_set_and_the_first_request_per_version() -> None:
    kv = DocumentKv({}, lambda alias: None, Registry())
    kv.observe("t1", _set("t1", 3), prompt_tokens=1000, cached_tokens=0)
    kv.observe("t1", _set("t1", 3), prompt_tokens=1000, cached_tokens=990)
    kv.observe("t2", _set("t2", 1), prompt_tokens=500, cached_tokens=400)
    kv.observe("t1", _set("t1", 4), prompt_tokens=1000, cached_tokens=5000)  # clamped
    t1, t2 = kv.snapshot()
    assert (t1["document_set"], t1["requests"], t1["cached_tokens"]) == ("t1", 3, 990 + 1000)
    assert t1["version"] == 4 and t1["first_request"]["hit_rate"] == 1.0
    assert t2["hit_rate"] == 0.8
    assert kv.snapshot("t2") == [t2]


async def test_changes_are_coalesced_per_team_and_the_queue_is_bounded() -> None:
    started: list[str] = []
    gate = asyncio.Event()

    class SlowAssembler:
        async def shared_prefix(self, team: str) -> None:
            started.append(team)
            await gate.wait()

    class Table:
        def route(self, alias: str) -> Any:
            return type("R", (), {"config": type("C", (), {"strategy": "kv-aware"})()})()

    prompts = {"docs": PromptConfig.model_validate({"retrieval": {"mode": "document_set"}})}
    registry = Registry()
    kv = DocumentKv(
        prompts, lambda alias: SlowAssembler(), registry,  # type: ignore[arg-type,return-value]
        routing=object(), table=Table,  # type: ignore[arg-type]
    )  # fmt: skip
    for _ in range(5):
        kv.changed("a")
    await asyncio.sleep(0)  # the worker takes "a"
    for _ in range(3):
        kv.changed("a")  # queued once more while it runs
    for i in range(MAX_PENDING + 5):
        kv.changed(f"t{i}")
    gate.set()
    await kv.idle()
    assert started.count("a") == 2  # eight changes, two prewarms
    assert len(started) == 2 + MAX_PENDING - 1
    assert 'fleetgate_document_prewarms_total{result="dropped"} 6' in registry.render().decode()
    await kv.aclose()
