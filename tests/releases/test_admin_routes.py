"""The registry's admin API: master key only, OpenAI-style 4xx for bad input, gates on
promotion to production (forced promotions audited)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import Gateway, registry_config, running_gateway, version_body

SUITE = {"suite": "golden.jsonl", "suite_digest": "ab" * 16}
GATES = {"chat": {"rules": [{"metric": "golden", "min_delta": -0.01},
                            {"metric": "red-team", "min": 0.98}]}}  # fmt: skip


@pytest.fixture
async def sim() -> AsyncIterator[str]:
    async with running_sim(SimConfig(model="tiny", mode="echo")) as url:
        yield url


def error(body: Any) -> tuple[str, str | None]:
    return body["error"]["type"], body["error"]["code"]


async def test_bad_input_is_a_clear_4xx(sim: str, tmp_path: Path) -> None:
    async with running_gateway(registry_config(sim), tmp_path, None) as gw:
        status, body = await gw.admin("GET", "/admin/registry/models", key="sk-wrong")
        assert status == 401 and body["error"]["type"] == "authentication_error"
        async with gw.session.post(gw.url + "/admin/registry/models") as resp:
            assert resp.status == 401
        cases: list[tuple[str, str, Any, int, str | None]] = [
            ("POST", "/admin/registry/models", {"name": "bad name!"}, 400, "name"),
            ("POST", "/admin/registry/models", {"name": "chat", "extra": 1}, 400, "extra"),
            ("GET", "/admin/registry/models/nope", None, 404, "model"),
        ]
        for method, path, body_in, want, param in cases:
            status, body = await gw.admin(method, path, json=body_in)
            assert status == want and body["error"]["param"] == param, (path, body)
        async with gw.session.post(
            gw.url + "/admin/registry/models", data=b"{not json",
            headers={"Authorization": "Bearer sk-master-releases"},
        ) as resp:  # fmt: skip
            assert resp.status == 400
        assert (await gw.admin("POST", "/admin/registry/models", json={"name": "chat"}))[0] == 201
        status, body = await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
        assert status == 409 and error(body) == ("invalid_request_error", "conflict")
        versions = "/admin/registry/models/chat/versions"
        status, body = await gw.admin("POST", versions, json={"artifact_uri": "x"})
        assert status == 400 and body["error"]["param"] == "deployments"
        bad_dep = version_body(sim, 1)
        bad_dep["deployments"][0]["api_base"] = "ftp://x"
        assert (await gw.admin("POST", versions, json=bad_dep))[0] == 400
        assert (await gw.admin("POST", versions, json=version_body(sim, 1)))[0] == 201
        promote = "/admin/registry/models/chat/promote"
        for body_in, param in [
            ({"version": "v1"}, "stage"),
            ({"stage": "staging", "version": "v1", "expected": 3}, "expected"),
            ({"stage": "staging", "version": "v1", "force": "yes"}, "force"),
            ({"stage": "staging", "version": "v1", "nope": 1}, "nope"),
            ({"stage": "a b", "version": "v1"}, "stage"),
        ]:
            status, body = await gw.admin("POST", promote, json=body_in)
            assert status == 400 and body["error"]["param"] == param, body
        status, body = await gw.admin("POST", promote, json={"stage": "staging", "version": "v9"})
        assert status == 404
        status, body = await gw.admin(
            "POST", promote, json={"stage": "staging", "version": "v1", "expected": "v0"}
        )
        assert status == 409 and body["error"]["param"] == "expected"
        status, body = await gw.admin("POST", "/admin/registry/models/chat/rollback")
        assert status == 409  # nothing to roll back to
        status, body = await gw.admin("GET", "/admin/registry/models/chat/history?limit=x")
        assert status == 400 and body["error"]["param"] == "limit"
        status, body = await gw.admin("POST", versions + "/v1/evals", json={"suite": "s"})
        assert status == 400


async def post_run(gw: Gateway, version: str, metrics: dict[str, float]) -> None:
    status, body = await gw.admin(
        "POST", f"/admin/registry/models/chat/versions/{version}/evals",
        json={**SUITE, "metrics": metrics,
              "items": [{"item_id": "i1", "kind": "golden", "score": 1.0, "passed": True}]},
    )  # fmt: skip
    assert status == 201, body


async def test_promotion_to_production_needs_a_passing_gate(
    sim: str, db_url: str, tmp_path: Path
) -> None:
    cfg = registry_config(sim, gates=GATES)
    cfg["tenancy"] = {"enabled": True, "spend_flush_interval_s": 0.05}
    async with running_gateway(cfg, tmp_path, db_url) as gw:
        await gw.admin("POST", "/admin/registry/models", json={"name": "chat"})
        for n in (1, 2, 3):
            await gw.admin("POST", "/admin/registry/models/chat/versions",
                           json=version_body(sim, n))  # fmt: skip
        promote = "/admin/registry/models/chat/promote"
        # no evaluation at all: inconclusive, refused
        status, body = await gw.admin("POST", promote, json={"stage": "production",
                                                             "version": "v1"})  # fmt: skip
        assert status == 409 and body["error"]["code"] == "gate_inconclusive", body
        # staging needs no gate
        status, _ = await gw.admin("POST", promote, json={"stage": "staging", "version": "v1"})
        assert status == 200
        # the first production version has no baseline: forced by the master key, audited
        await post_run(gw, "v1", {"golden": 0.95, "red-team": 0.99})
        status, gate = await gw.admin("GET", "/admin/registry/models/chat/versions/v1/gate")
        assert gate["verdict"] == "inconclusive" and "baseline" in gate["reason"], gate
        status, body = await gw.admin(
            "POST", promote, json={"stage": "production", "version": "v1", "force": True}
        )
        assert status == 200 and body["forced"] is True and body["gate"] == "inconclusive"
        # v2 within a point of v1 and refusing enough: passes
        await post_run(gw, "v2", {"golden": 0.945, "red-team": 0.985})
        status, gate = await gw.admin("GET", "/admin/registry/models/chat/versions/v2/gate")
        assert gate["verdict"] == "pass", gate
        status, body = await gw.admin("POST", promote, json={"stage": "production",
                                                             "version": "v2"})  # fmt: skip
        assert status == 200 and body["forced"] is False, body
        # v3 two points below v2, red-team too low: fails with both reasons
        await post_run(gw, "v3", {"golden": 0.925, "red-team": 0.9})
        status, body = await gw.admin("POST", promote, json={"stage": "production",
                                                             "version": "v3"})  # fmt: skip
        assert status == 409 and body["error"]["code"] == "gate_fail"
        assert "golden" in body["error"]["message"] and "red-team" in body["error"]["message"]
        status, model = await gw.admin("GET", "/admin/registry/models/chat")
        assert model["stages"] == {"previous": "v1", "production": "v2", "staging": "v1"}
        status, shown = await gw.admin("GET", "/admin/registry/models/chat/versions/v3")
        assert shown["evals"][0]["metrics"]["red-team"] == 0.9
        status, run = await gw.admin("GET", f"/admin/registry/evals/{shown['evals'][0]['id']}")
        assert run["items"][0]["item_id"] == "i1"

        async def audited() -> list[str]:
            status, body = await gw.admin("GET", "/admin/audit?kind=admin&limit=100")
            return [row["action"] for row in body["data"]]

        for _ in range(100):
            actions = await audited()
            if "registry.promote.forced" in actions and actions.count("registry.promote") >= 2:
                break
            await asyncio.sleep(0.05)
        assert "registry.promote.forced" in actions, actions
        assert "registry.version.register" in actions and "registry.model.create" in actions
