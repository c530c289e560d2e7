"""Traces follow the OpenTelemetry GenAI conventions; the access log is written off the path."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from fleetgate.api.state import GATEWAY
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream


async def test_genai_span_per_request(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    cfg = one_alias(upstream)
    cfg["server"] = {"otel_exporter": "memory"}
    client = await gateway(cfg)
    body = {"model": "tiny", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    assert (await client.post("/v1/chat/completions", json=body, headers=AUTH)).status == 200
    spans = client.app[GATEWAY].tracer.memory.get_finished_spans()
    requests = [s for s in spans if s.kind.name == "SERVER"]
    assert len(requests) == 1  # the request's; its stages and attempts are children
    span = requests[0]
    assert span.name == "chat tiny"
    attrs = dict(span.attributes)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "tiny"
    assert attrs["gen_ai.response.model"] == "up-model"
    assert attrs["gen_ai.request.max_tokens"] == 9
    assert attrs["gen_ai.usage.input_tokens"] == 10
    assert attrs["gen_ai.usage.output_tokens"] == 2
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)


async def test_tracing_off_by_default(gateway: GatewayFactory, upstream: FakeUpstream) -> None:
    client = await gateway(one_alias(upstream))
    assert client.app[GATEWAY].tracer.enabled is False


async def test_access_log_lines(
    gateway: GatewayFactory, upstream: FakeUpstream, tmp_path: Path
) -> None:
    client = await gateway(one_alias(upstream))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    await client.post("/v1/chat/completions", json=body, headers=AUTH)
    await client.post("/v1/chat/completions", json={**body, "model": "nope"}, headers=AUTH)
    log = tmp_path / "access.log"
    for _ in range(30):
        if log.exists() and len(log.read_bytes().splitlines()) >= 1:
            break
        await asyncio.sleep(0.1)
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    assert lines[0]["alias"] == "tiny" and lines[0]["status"] == 200
    assert lines[0]["deployment"] == "a" and lines[0]["completion_tokens"] == 2
    assert lines[0]["key"] == "master"
