"""`model: auto` is resolved before everything that depends on the alias: the key's allow-list,
the alias's limits and its safety policy apply to the alias actually served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream
from tests.routing.test_semantic import SEMANTIC, HashingEncoder, _stage

TRACEBACK = "Traceback (most recent call last): KeyError 'x'"  # a rule: code -> smart


def _config(fast: FakeUpstream, smart: FakeUpstream, **extra: Any) -> dict[str, Any]:
    def alias(name: str, up: FakeUpstream) -> dict[str, Any]:
        dep = {"provider": "openai", "model": f"{name}-model", "api_base": up.url, "name": name}
        return {"alias": name, "deployments": [dep]}

    return {"models": [alias("fast", fast), alias("smart", smart)], "semantic": SEMANTIC, **extra}


def _chat(text: str) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": text}]}


async def _key(client: Any, **fields: Any) -> str:
    name = "t" + "-".join(fields.get("aliases", []))
    resp = await client.post("/admin/teams", json={"name": name}, headers=AUTH)
    assert resp.status == 201, await resp.text()
    team = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team, **fields}, headers=AUTH)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["key"])


async def test_a_key_allowed_only_auto_does_not_reach_smart_through_it(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Path
) -> None:
    stage = await _stage(tmp_path, HashingEncoder())
    client = await gateway(_config(upstream, upstream_b), stages=[stage])
    assert await stage.wait_ready(30)
    only_auto = {"Authorization": f"Bearer {await _key(client, aliases=['auto'])}"}
    resp = await client.post("/v1/chat/completions", json=_chat(TRACEBACK), headers=only_auto)
    assert resp.status == 403
    assert not upstream_b.seen  # smart never called
    fast_ok = {"Authorization": f"Bearer {await _key(client, aliases=['auto', 'fast'])}"}
    resp = await client.post("/v1/chat/completions", json=_chat(TRACEBACK), headers=fast_ok)
    assert resp.status == 200  # falls back to the default intent, which this key may use
    assert resp.headers["x-fleetgate-deployment"] == "fast"
    assert not upstream_b.seen


async def test_smart_alias_limits_apply_through_auto(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Path
) -> None:
    stage = await _stage(tmp_path, HashingEncoder())
    config = _config(upstream, upstream_b, tenancy={"alias_limits": {"smart": {"rpm": 1}}})
    client = await gateway(config, stages=[stage])
    assert await stage.wait_ready(30)
    first = await client.post("/v1/chat/completions", json=_chat(TRACEBACK), headers=AUTH)
    assert first.status == 200
    second = await client.post("/v1/chat/completions", json=_chat(TRACEBACK), headers=AUTH)
    assert second.status == 429
    assert len(upstream_b.seen) == 1


async def test_smart_safety_policy_applies_through_auto(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Path
) -> None:
    stage = await _stage(tmp_path, HashingEncoder())
    safety = {
        "checks": {
            "strict_words": {
                "type": "words",
                "options": {"include_defaults": False, "lists": {"internal": ["keyerror"]}},
            }
        },
        "policies": {"default": {"input": []}, "strict": {"input": ["strict_words"]}},
        "aliases": {"smart": "strict"},
    }
    client = await gateway(_config(upstream, upstream_b, safety=safety), stages=[stage])
    assert await stage.wait_ready(30)
    resp = await client.post("/v1/chat/completions", json=_chat(TRACEBACK), headers=AUTH)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "content_filter"
    assert not upstream_b.seen
