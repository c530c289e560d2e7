"""KV prewarm: a document prefix sent ahead to chosen replicas is cached for the first request."""

from __future__ import annotations

from contextlib import AsyncExitStack

from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory

DOC = "Team handbook. " + " ".join(f"rule{i} applies to everyone" for i in range(150))
SIM = SimConfig(model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.1, output_len=2)


async def test_the_first_request_after_a_prewarm_finds_its_document_cached(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(running_sim(SIM)) for _ in range(3)]
        client = await gateway({
            "models": [{"alias": "chat", "strategy": "kv-aware", "deployments": [
                {"model": "m", "api_base": f"{u}/v1", "name": f"e{i}"}
                for i, u in enumerate(urls)]}],
            "routing": {"scrape_interval_s": 0.05, "tenant_isolation": False},
        })  # fmt: skip
        system = {"role": "system", "content": DOC}
        resp = await client.post("/admin/routing/prewarm", headers=AUTH, json={
            "alias": "chat", "messages": [system], "replicas": 2})  # fmt: skip
        assert resp.status == 200, await resp.text()
        results = (await resp.json())["data"]
        warmed = {r["deployment"] for r in results if r["warmed"]}
        assert len(warmed) == 2
        body = {"model": "chat", "max_tokens": 2, "messages": [
            system, {"role": "user", "content": "may I bring a dog?"}]}  # fmt: skip
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        answer = await resp.json()
        assert resp.headers["x-fleetgate-deployment"] in warmed
        assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] > 200


async def test_bad_prewarm_requests_are_refused(gateway: GatewayFactory) -> None:
    async with running_sim(SIM) as url:
        client = await gateway({
            "models": [
                {"alias": "chat", "strategy": "kv-aware",
                 "deployments": [{"model": "m", "api_base": f"{url}/v1"}]},
                {"alias": "plain", "deployments": [{"model": "m", "api_base": f"{url}/v1"}]}],
        })  # fmt: skip
        ok = {"alias": "chat", "messages": [{"role": "system", "content": "x"}], "tenant": "t"}
        for bad, param in (({**ok, "alias": "plain"}, "alias"),
                           ({**ok, "messages": []}, "messages"),
                           ({**ok, "tenant": None}, "tenant"),
                           ({**ok, "replicas": 0}, "replicas")):  # fmt: skip
            resp = await client.post("/admin/routing/prewarm", headers=AUTH, json=bad)
            assert resp.status == 400 and (await resp.json())["error"]["param"] == param
        resp = await client.post("/admin/routing/prewarm", headers=AUTH, json={**ok, "alias": "x"})
        assert resp.status == 404
        resp = await client.post("/admin/routing/prewarm", json=ok)
        assert resp.status in (401, 403)
