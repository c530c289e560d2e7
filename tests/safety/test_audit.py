from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety import AuditItem, AuditQueue, AuditRecord, SafetyMetrics, TextTurn
from fleetgate.safety.base import close_check
from fleetgate.safety.checks.llama_guard import LlamaGuardCheck
from fleetgate.telemetry.registry import Registry
from tests.resources.support import outbound
from tests.safety.fake_llama_guard import FakeLlamaGuard

__all__ = ["outbound"]


def exchange(reply: str, key: str = "key-1") -> AuditItem:
    return AuditItem(
        messages=[TextTurn("user", "tell me a story"), TextTurn("assistant", reply)],
        key_id=key, team="t1", alias="fast", request_id=f"req-{reply[:8]}",
    )  # fmt: skip


@pytest.fixture
async def webhook() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", hook)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    yield str(srv.make_url("/hook")), received
    await srv.close()


async def test_verdicts_reach_sink_metrics_webhook_and_suspend_the_key(
    webhook: tuple[str, list[dict[str, Any]]],
    outbound: OutboundHttp,
) -> None:
    hook_url, alerts = webhook
    fake = FakeLlamaGuard()
    guard = LlamaGuardCheck(base_url=await fake.start(), model="llama-guard-3", http=outbound)
    reg = Registry()
    records: list[AuditRecord] = []
    suspended: list[str] = []

    async def suspend(key_id: str) -> None:
        suspended.append(key_id)

    audit = AuditQueue(
        [guard], metrics=SafetyMetrics(reg), sink=records.append, webhook_url=hook_url,
        suspend_after=2, on_suspend=suspend, workers=2, http=outbound
    )  # fmt: skip
    await audit.start()
    try:
        assert audit.submit(exchange("Once upon a time there was a kind dragon."))
        assert audit.submit(exchange("Here is how to build a bomb: ..."))
        await audit.join()
        assert suspended == []
        audit.submit(exchange("To poison someone, you ..."))
        audit.submit(exchange("And another bomb recipe ..."))
        await audit.join()
    finally:
        await audit.aclose()
        await close_check(guard)
        await fake.stop()

    assert len(records) == 4
    flagged = [r for r in records if r.flagged]
    assert len(flagged) == 3 and {c for r in flagged for c in r.categories} == {"S1", "S9"}
    assert fake.judged[0] == ("Agent", "Once upon a time there was a kind dragon.")
    assert suspended == ["key-1"]  # once, on the second violation
    assert len(alerts) == 3 and alerts[0]["event"] == "safety_violation"
    assert alerts[0]["key_id"] == "key-1" and alerts[0]["categories"]
    text = reg.render().decode()
    assert 'fleetgate_safety_audit_total{result="unsafe"} 3' in text
    assert 'fleetgate_safety_audit_total{result="safe"} 1' in text
    assert 'fleetgate_safety_audit_violations_total{category="S9"} 2' in text
    assert 'fleetgate_safety_alerts_total{result="sent"} 3' in text
    assert "fleetgate_safety_key_suspensions_total 1" in text


async def test_stopped_guard_endpoint_degrades_to_counted_failures(outbound: OutboundHttp) -> None:
    fake = FakeLlamaGuard()
    url = await fake.start()
    await fake.stop()
    guard = LlamaGuardCheck(base_url=url, model="m", timeout_s=2, http=outbound)
    reg = Registry()
    records: list[AuditRecord] = []
    audit = AuditQueue(
        [guard], metrics=SafetyMetrics(reg), sink=records.append, suspend_after=1, http=outbound
    )
    await audit.start()
    try:
        for i in range(3):
            audit.submit(exchange(f"bomb {i}"))
        await audit.join()
    finally:
        await audit.aclose()
        await close_check(guard)
    assert audit.failures == 3 and guard.failures == 3
    assert all(r.failed and not r.flagged for r in records)
    assert not audit.suspended  # failures are not violations
    assert 'fleetgate_safety_audit_total{result="error"} 3' in reg.render().decode()


async def test_full_queue_sheds_and_counts_without_blocking(outbound: OutboundHttp) -> None:
    reg = Registry()
    audit = AuditQueue([], metrics=SafetyMetrics(reg), queue_size=2, http=outbound)  # no workers
    results = [audit.submit(exchange(f"reply {i}")) for i in range(5)]
    assert results == [True, True, False, False, False]
    assert audit.shed == 3
    text = reg.render().decode()
    assert "fleetgate_safety_audit_shed_total 3" in text
    assert "fleetgate_safety_audit_queue_depth 2" in text


async def test_failing_sink_does_not_kill_the_workers(outbound: OutboundHttp) -> None:
    fake = FakeLlamaGuard()
    guard = LlamaGuardCheck(base_url=await fake.start(), model="m", http=outbound)
    calls: list[AuditRecord] = []

    def sink(record: AuditRecord) -> None:
        calls.append(record)
        if len(calls) == 1:
            raise RuntimeError("audit log down")

    audit = AuditQueue([guard], sink=sink, workers=1, http=outbound)
    await audit.start()
    try:
        audit.submit(exchange("one"))
        audit.submit(exchange("two"))
        await audit.join()
    finally:
        await audit.aclose()
        await close_check(guard)
        await fake.stop()
    assert len(calls) == 2


async def test_a_failing_alert_webhook_is_counted_and_logged_without_its_url(
    caplog: pytest.LogCaptureFixture,
    outbound: OutboundHttp,
) -> None:
    """A webhook URL's path is often its secret (Slack's are): a 4xx/5xx answer is counted as
    failed and logged by status only."""
    fake = FakeLlamaGuard()
    guard = LlamaGuardCheck(base_url=await fake.start(), model="m", http=outbound)

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "gone"}, status=410)

    app = web.Application()
    app.router.add_post("/services/T000/B000/s3cr3tT0ken", refuse)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    reg = Registry()
    hook = str(srv.make_url("/services/T000/B000/s3cr3tT0ken"))
    audit = AuditQueue(
        [guard], metrics=SafetyMetrics(reg), sink=lambda r: None, webhook_url=hook, http=outbound
    )
    await audit.start()
    try:
        with caplog.at_level("WARNING"):
            audit.submit(exchange("Here is how to build a bomb: ..."))
            await audit.join()
    finally:
        await audit.aclose()
        await close_check(guard)
        await fake.stop()
        await srv.close()
    assert 'fleetgate_safety_alerts_total{result="failed"} 1' in reg.render().decode()
    assert "HTTP 410" in caplog.text and "s3cr3tT0ken" not in caplog.text
