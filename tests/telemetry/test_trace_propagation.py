"""W3C trace context across services: a caller's ``traceparent`` is continued by the gateway,
reaches the engine (the simulator records what it received) and the guard model, and the
stages' spans nest under the request span."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.sim import SimConfig, running_sim
from tests.conftest import AUTH, GatewayFactory

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
BODY = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


class Guard:
    """A Llama Guard endpoint that judges everything safe and records the trace headers."""

    def __init__(self) -> None:
        self.traceparents: list[str | None] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _completions(self, request: web.Request) -> web.Response:
        self.traceparents.append(request.headers.get("traceparent"))
        return web.json_response({"choices": [{"text": "safe", "index": 0}]})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"


@pytest.fixture
async def sim() -> AsyncIterator[str]:
    async with running_sim(SimConfig(mode="echo")) as url:
        yield url


@pytest.fixture
async def guard() -> AsyncIterator[Guard]:
    g = Guard()
    await g.start()
    yield g
    assert g.runner is not None
    await g.runner.cleanup()


def _config(sim: str, guard: Guard | None = None, exporter: str = "memory") -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "models": [
            {
                "alias": "tiny",
                "deployments": [
                    {"model": "tiny", "api_base": f"{sim}/v1", "name": "sim", "engine": "vllm"}
                ],
            }
        ],
        "server": {"otel_exporter": exporter},
    }
    if guard is not None:
        check = {"base_url": guard.url, "model": "llama-guard-3", "timeout_s": 5}
        cfg["safety"] = {
            "checks": {"guard": {"type": "llama_guard", "options": check}},
            "policies": {"default": {"input": ["guard"]}},
        }
    return cfg


async def _received(sim: str) -> list[dict[str, str]]:
    async with aiohttp.ClientSession() as s, s.get(f"{sim}/sim/requests") as r:
        seen: list[dict[str, str]] = await r.json()
        return seen


@pytest.mark.parametrize("stream", [False, True])
async def test_traceparent_reaches_engine_and_guard_and_stages_nest(
    gateway: GatewayFactory, sim: str, guard: Guard, stream: bool
) -> None:
    client = await gateway(_config(sim, guard))
    headers = {**AUTH, "traceparent": TRACEPARENT, "tracestate": "vendor=x"}
    resp = await client.post(
        "/v1/chat/completions", json={**BODY, "stream": stream}, headers=headers
    )
    assert resp.status == 200
    await resp.read()

    spans = client.app[GATEWAY].tracer.memory.get_finished_spans()
    by_name = {s.name: s for s in spans}
    root = by_name["chat tiny"]
    # the request span continues the caller's trace, under the caller's span
    assert f"{root.context.trace_id:032x}" == TRACE_ID
    assert root.parent is not None and f"{root.parent.span_id:016x}" == CALLER_SPAN
    for name in ("tenancy", "safety", "routing"):
        assert by_name[name].parent.span_id == root.context.span_id, name
        assert by_name[name].context.trace_id == root.context.trace_id
    upstream = [s for s in spans if s.name == "chat tiny" and s is not root]
    assert len(upstream) == 1 and upstream[0].parent.span_id == root.context.span_id
    attrs = dict(upstream[0].attributes)
    assert attrs["gen_ai.request.model"] == "tiny" and attrs["fleetgate.deployment"]
    assert attrs["gen_ai.usage.output_tokens"] > 0 and attrs["server.address"] == "127.0.0.1"
    assert dict(root.attributes)["gen_ai.usage.output_tokens"] > 0

    # the engine got the upstream span's context, the caller's trace state with it
    seen = (await _received(sim))[-1]
    version, trace_id, parent, flags = seen["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert parent == f"{upstream[0].context.span_id:016x}"
    assert seen["tracestate"] == "vendor=x"
    # the guard model was called inside the safety span, and was told so
    assert guard.traceparents[-1] == (f"00-{TRACE_ID}-{by_name['safety'].context.span_id:016x}-01")


async def test_retried_attempt_has_its_own_failed_span(gateway: GatewayFactory, sim: str) -> None:
    cfg = _config(sim)
    dead = {"model": "tiny", "api_base": "http://127.0.0.1:9/v1", "name": "dead", "weight": 1e6}
    cfg["models"][0]["deployments"].insert(0, dead)
    cfg["router"] = {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01}
    client = await gateway(cfg)
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.status == 200
    spans = client.app[GATEWAY].tracer.memory.get_finished_spans()
    attempts = [s for s in spans if s.name == "chat tiny" and s.kind.name == "CLIENT"]
    assert [dict(s.attributes)["fleetgate.deployment"] for s in attempts] == [
        "dead",
        "sim",
    ]
    assert attempts[0].status.status_code.name == "ERROR"
    assert attempts[1].status.status_code.name == "UNSET"


async def test_tracing_off_passes_the_callers_context_through(
    gateway: GatewayFactory, sim: str
) -> None:
    client = await gateway(_config(sim, exporter="none"))
    headers = {**AUTH, "traceparent": TRACEPARENT}
    assert (await client.post("/v1/chat/completions", json=BODY, headers=headers)).status == 200
    assert (await _received(sim))[-1]["traceparent"] == TRACEPARENT
    # no caller context, tracing off: nothing is sent
    assert (await client.post("/v1/chat/completions", json=BODY, headers=AUTH)).status == 200
    assert "traceparent" not in (await _received(sim))[-1]


async def test_malformed_traceparent_starts_a_new_trace(gateway: GatewayFactory, sim: str) -> None:
    client = await gateway(_config(sim))
    headers = {**AUTH, "traceparent": "00-zz-nonsense-01"}
    assert (await client.post("/v1/chat/completions", json=BODY, headers=headers)).status == 200
    spans = client.app[GATEWAY].tracer.memory.get_finished_spans()
    root = next(s for s in spans if s.kind.name == "SERVER")
    assert root.parent is None
    seen = (await _received(sim))[-1]["traceparent"]
    assert seen.split("-")[1] == f"{root.context.trace_id:032x}"
