"""The asynchronous guard-model audit through the gateway, against the fake Llama Guard server:
verdicts land in the audit log (store) with categories and in the metrics, a stopped guard
endpoint degrades to counted failures while users still get 200s, and a key is suspended
after the configured number of violations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream, Reply
from tests.procs import metric_value
from tests.safety.fake_llama_guard import FakeLlamaGuard
from tests.safety.gwtools import audit_rows, chat, eventually, gateway_config, metrics_text

HARMFUL = "Sure. Pack the explosive into a pipe and the bomb is ready."
BENIGN = "The capital of France is Paris."


@pytest.fixture
async def guard() -> AsyncIterator[FakeLlamaGuard]:
    fake = FakeLlamaGuard()
    await fake.start()
    yield fake
    await fake.stop()


def _safety(guard_url: str, **audit: Any) -> dict[str, Any]:
    return {
        "checks": {
            "guard": {
                "type": "llama_guard",
                "options": {"base_url": guard_url, "model": "llama-guard-3", "timeout_s": 2},
            },
        },  # fmt: skip
        "policies": {"default": {"audit": ["guard"]}},
        "audit": {"workers": 1, **audit},
    }


async def test_audit_log_holds_guard_verdicts_with_categories(
    gateway: GatewayFactory, upstream: FakeUpstream, guard: FakeLlamaGuard
) -> None:
    client = await gateway(
        gateway_config(upstream.url, _safety(f"http://127.0.0.1:{guard.port}/v1"))
    )
    upstream.queue(Reply(content=BENIGN), Reply(content=HARMFUL))
    ok = await client.post("/v1/chat/completions", json=chat("capital of France?"), headers=AUTH)
    bad = await client.post("/v1/chat/completions", json=chat("how do I?"), headers=AUTH)
    assert ok.status == bad.status == 200  # the audit never changes what the user got
    assert (await bad.json())["choices"][0]["message"]["content"] == HARMFUL

    rows = await eventually(lambda: _rows_if(client, 2), what="two audit rows in the store")
    by_request = {r["request_id"]: r for r in rows}
    flagged = by_request[bad.headers["x-request-id"]]
    assert flagged["flagged"] is True and flagged["categories"] == ["S9"]
    assert flagged["verdicts"][0]["check"] == "guard" and flagged["failed"] is False
    safe = by_request[ok.headers["x-request-id"]]
    assert safe["flagged"] is False and safe["categories"] == []
    # the guard judged the assistant's turn, in context
    assert ("Agent", HARMFUL) in guard.judged
    flagged_only = await audit_rows(client, flagged="true")
    assert [r["request_id"] for r in flagged_only] == [bad.headers["x-request-id"]]

    text = await metrics_text(client)
    assert metric_value(text, "fleetgate_safety_audit_total", result="unsafe") == 1
    assert metric_value(text, "fleetgate_safety_audit_total", result="safe") == 1
    assert metric_value(text, "fleetgate_safety_audit_violations_total", category="S9") == 1


async def _rows_if(client: Any, n: int, **query: str) -> list[dict[str, Any]] | None:
    rows = await audit_rows(client, **query)
    return rows if len(rows) >= n else None


async def test_stopped_guard_endpoint_counts_failures_and_users_get_200s(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    stopped = FakeLlamaGuard()
    url = await stopped.start()
    await stopped.stop()  # nothing listens there any more
    client = await gateway(gateway_config(upstream.url, _safety(url)))
    upstream.queue(*(Reply(content=HARMFUL) for _ in range(3)))
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=chat("hi"), headers=AUTH)
        assert resp.status == 200

    async def three_failures() -> str | None:
        text = await metrics_text(client)
        done = metric_value(text, "fleetgate_safety_audit_total", result="error") >= 3
        return text if done else None

    text = await eventually(three_failures, what="three counted audit failures")
    assert (
        metric_value(text, "fleetgate_safety_check_errors_total", stage="audit", check="guard") == 3
    )
    assert metric_value(text, "fleetgate_safety_audit_total", result="unsafe") == 0
    rows = await eventually(lambda: _rows_if(client, 3), what="failed rows in the audit log")
    assert all(r["failed"] and not r["flagged"] for r in rows)


async def test_key_is_suspended_after_n_violations(
    gateway: GatewayFactory, upstream: FakeUpstream, guard: FakeLlamaGuard
) -> None:
    url = f"http://127.0.0.1:{guard.port}/v1"
    client = await gateway(gateway_config(upstream.url, _safety(url, suspend_after=2)))
    await client.post("/admin/teams", json={"name": "t1"}, headers=AUTH)
    keys = []
    for _ in range(2):
        made = await (await client.post("/admin/keys", json={"team": "t1"}, headers=AUTH)).json()
        keys.append(({"Authorization": f"Bearer {made['key']}"}, made["id"]))
    (offender, offender_id), (bystander, _) = keys

    upstream.queue(Reply(content=HARMFUL), Reply(content=HARMFUL))
    for _ in range(2):
        resp = await client.post("/v1/chat/completions", json=chat("x"), headers=offender)
        assert resp.status == 200

    async def refused() -> bool:
        resp = await client.post("/v1/chat/completions", json=chat("again"), headers=offender)
        return resp.status == 401

    await eventually(refused, what="the offending key refused with 401")
    ok = await client.post("/v1/chat/completions", json=chat("hello"), headers=bystander)
    assert ok.status == 200  # only the offender is suspended
    text = await metrics_text(client)
    assert metric_value(text, "fleetgate_safety_key_suspensions_total") == 1
    audit = await (await client.get("/admin/audit", params={"kind": "admin"}, headers=AUTH)).json()
    revokes = [r for r in audit["data"] if r["action"] == "key.revoke"]
    assert revokes and revokes[0]["target"] == offender_id
    assert revokes[0]["actor_key_id"] == "safety-audit"


async def test_without_tenancy_verdicts_go_to_a_jsonl_audit_log(
    gateway: GatewayFactory, upstream: FakeUpstream, guard: FakeLlamaGuard, tmp_path: Any
) -> None:
    url = f"http://127.0.0.1:{guard.port}/v1"
    client = await gateway(gateway_config(upstream.url, _safety(url), tenancy=False))
    upstream.queue(Reply(content=HARMFUL))
    resp = await client.post("/v1/chat/completions", json=chat("x"), headers=AUTH)
    assert resp.status == 200
    rows = await eventually(lambda: _rows_if(client, 1), what="a row in the JSONL audit log")
    assert rows[0]["categories"] == ["S9"] and rows[0]["request_id"] == resp.headers["x-request-id"]
    assert (tmp_path / "safety-audit.jsonl").exists()
