"""One ext_proc stream in process: the picker's answers to the messages Envoy sends, on a
gateway built as ``fleetgate epp`` builds it (no Envoy, no engine: nothing is sent)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from google.protobuf import struct_pb2

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.epp import protocol
from fleetgate.epp.endpoints import endpoint_of
from fleetgate.epp.exchange import EppOptions, Exchange
from fleetgate.epp.picker import EndpointPicker
from fleetgate.errors import Overloaded, RateLimited
from tests.conftest import MASTER, GatewayFactory

A, B, C = "127.0.0.1:18001", "127.0.0.1:18002", "127.0.0.1:18003"


def _config() -> dict[str, Any]:
    return {
        "models": [
            {"alias": "chat", "strategy": "round-robin", "deployments": [
                {"model": "tiny", "api_base": f"http://{A}/v1", "name": "a"},
                {"model": "tiny", "api_base": f"http://{B}/v1", "name": "b"},
                {"model": "other", "api_base": f"http://{C}/v1", "name": "c"}]},
        ],
    }  # fmt: skip


async def _gateway(gateway: GatewayFactory) -> GatewayState:
    client = await gateway(_config())
    return client.app[GATEWAY]


def _exchange(gw: GatewayState, **options: Any) -> Exchange:
    opts = EppOptions(**options)
    return Exchange(gw, EndpointPicker(gw.dispatcher, gw.tables, gw.health, opts.fallbacks), opts)


def _headers(
    path: str = "/v1/chat/completions",
    key: str = MASTER,
    subset: list[str] | None = None,
    extra: dict[str, str] | None = None,
) -> Any:
    msg = ext_proc.ProcessingRequest()
    h = msg.request_headers.headers.headers
    h.add(key=":path", raw_value=path.encode())
    h.add(key="authorization", raw_value=f"Bearer {key}".encode())
    for name, value in (extra or {}).items():
        h.add(key=name, raw_value=value.encode())
    if subset is not None:
        value = struct_pb2.Struct()
        value.update({protocol.SUBSET: subset})
        msg.metadata_context.filter_metadata[protocol.SUBSET_NAMESPACE].CopyFrom(value)
    return msg


def _body(body: dict[str, Any]) -> Any:
    msg = ext_proc.ProcessingRequest()
    msg.request_body.body = orjson.dumps(body)
    msg.request_body.end_of_stream = True
    return msg


def _sent(reply: Any) -> tuple[dict[str, str], dict[str, Any]]:
    common = reply.request_body.response
    headers = {h.header.key: h.header.raw_value.decode()
               for h in common.header_mutation.set_headers}  # fmt: skip
    return headers, orjson.loads(common.body_mutation.body)


def _response(status: int, served: str | None, *, sse: bool = True) -> Any:
    msg = ext_proc.ProcessingRequest()
    h = msg.response_headers.headers.headers
    h.add(key=":status", raw_value=str(status).encode())
    kind = b"text/event-stream" if sse else b"application/json"
    h.add(key="content-type", raw_value=kind)
    if served is not None:
        value = struct_pb2.Struct()
        value.update({protocol.SERVED: served})
        msg.metadata_context.filter_metadata["envoy.lb"].CopyFrom(value)
    return msg


def _chunk(data: bytes, end: bool) -> Any:
    msg = ext_proc.ProcessingRequest()
    msg.response_body.body = data
    msg.response_body.end_of_stream = end
    return msg


CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def test_the_pick_rewrites_the_alias_and_asks_a_stream_for_its_usage(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    ex = _exchange(gw)
    assert (await ex.handle(_headers())).HasField("request_headers")
    headers, body = _sent(await ex.handle(_body({**CHAT, "stream": True})))
    assert headers[protocol.DESTINATION] in (A, B, C)
    assert body["model"] == ("other" if headers[protocol.DESTINATION] == C else "tiny")
    assert body["stream_options"] == {"include_usage": True}
    assert headers["content-length"] == str(len(orjson.dumps(body)))
    await ex.close()


async def test_the_subset_hint_narrows_the_pick_and_an_empty_one_is_503(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    for _ in range(4):
        ex = _exchange(gw)
        await ex.handle(_headers(subset=[B]))
        headers, _ = _sent(await ex.handle(_body(CHAT)))
        assert headers[protocol.DESTINATION] == B
        await ex.close()
    ex = _exchange(gw)
    await ex.handle(_headers(subset=[]))
    reply = await ex.handle(_body(CHAT))
    assert reply.immediate_response.status.code == 503
    await ex.close()


async def test_fallbacks_share_the_picks_model_and_the_served_one_is_attributed(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    deps = {d.id: d for d in gw.tables.table.deployments()}
    for _ in range(3):  # round robin: each deployment first once
        ex = _exchange(gw, fallbacks=2)
        await ex.handle(_headers())
        headers, body = _sent(await ex.handle(_body({**CHAT, "stream": True})))
        listed = headers[protocol.DESTINATION].split(",")
        if listed[0] == C:
            assert listed == [C]  # no other deployment serves "other": nothing to retry on
            await ex.close()
            continue
        assert sorted(listed) == [A, B]  # the same model only
        first, fallback = listed
        name = {A: "a", B: "b"}
        assert deps[name[first]].state.in_flight == 1
        reply = await ex.handle(_response(200, fallback))  # Envoy retried on the fallback
        sets = reply.response_headers.response.header_mutation.set_headers
        set_headers = {h.header.key: h.header.raw_value.decode() for h in sets}
        assert set_headers["x-fleetgate-deployment"] == name[fallback]
        assert (deps[name[first]].state.in_flight, deps[name[fallback]].state.in_flight) == (0, 1)
        usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}\n\n'
        changed = await ex.handle(_chunk(usage + b"data: [DONE]\n\n", True))
        assert changed.response_body.response.body_mutation.body == b"data: [DONE]\n\n"
        assert ex.done
        assert deps[name[fallback]].state.in_flight == 0
        await ex.close()


@pytest.mark.parametrize(("key", "path", "status"), [
    ("sk-nope", "/v1/chat/completions", 401),
    (MASTER, "/v1/images/generations", 404),
])  # fmt: skip
async def test_refusals_are_immediate_openai_errors(
    gateway: GatewayFactory, key: str, path: str, status: int
) -> None:
    gw = await _gateway(gateway)
    ex = _exchange(gw)
    await ex.handle(_headers(path=path, key=key))
    reply = await ex.handle(_body(CHAT))
    assert reply.immediate_response.status.code == status
    assert orjson.loads(reply.immediate_response.body)["error"]["message"]
    await ex.close()


def test_a_shed_request_is_the_protocols_429() -> None:
    from fleetgate.epp.exchange import _refusal

    reply = _refusal(Overloaded("pool saturated", code="queue_full", retry_after=2))
    assert reply.immediate_response.status.code == 429
    sent = {h.header.key: h.header.raw_value for h in reply.immediate_response.headers.set_headers}
    assert sent["Retry-After"] == b"2"


async def test_an_engines_5xx_behind_envoy_counts_towards_its_cool_down(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    deps = {endpoint_of(d): d for d in gw.tables.table.deployments()}
    ex = _exchange(gw)
    await ex.handle(_headers(subset=[A]))
    await ex.handle(_body(CHAT))
    await ex.handle(_response(503, A, sse=False))
    assert deps[A].state.consecutive_failures == 1
    await ex.handle(_chunk(b'{"error":{"message":"overloaded"}}', True))
    ok = _exchange(gw)
    await ok.handle(_headers(subset=[A]))
    await ok.handle(_body(CHAT))
    await ok.handle(_response(200, A, sse=False))
    assert deps[A].state.consecutive_failures == 0
    await ok.close()
    await ex.close()


async def test_header_only_mode_bills_an_answer_at_max_tokens_and_a_failure_not_at_all(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    outcomes = []
    for status in (200, 502):
        ex = _exchange(gw, response_body="none")
        await ex.handle(_headers())
        await ex.handle(_body({**CHAT, "stream": True, "max_tokens": 33}))
        assert ex._req is not None
        outcomes.append(ex._req.outcome)
        await ex.handle(_response(status, None))
        assert ex.done  # settled at the response's headers: no body follows
    served, failed = outcomes
    assert (served.completion_tokens, served.tags["epp_billing"][:11]) == (33, "header-only")
    assert served.prompt_tokens > 0
    assert (failed.deployment, failed.completion_tokens, failed.status) == (None, 0, 502)


async def test_the_callers_trace_continues_to_the_engine(gateway: GatewayFactory) -> None:
    gw = await _gateway(gateway)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    ex = _exchange(gw)
    await ex.handle(_headers(extra={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}))
    headers, _ = _sent(await ex.handle(_body(CHAT)))
    assert headers["traceparent"].split("-")[1] == trace_id
    assert headers["x-request-id"]
    await ex.close()


class _Refusing:
    name = "refusing"

    def __init__(self) -> None:
        self.after_calls = 0

    async def before(self, req: Any) -> None:
        raise RateLimited("slow down", retry_after=3)

    def after(self, req: Any, outcome: Any) -> None:
        self.after_calls += 1


async def test_a_stage_refusal_is_a_429_recorded_and_settled_once(
    gateway: GatewayFactory,
) -> None:
    refusing = _Refusing()
    client = await gateway(_config(), stages=[refusing])
    gw = client.app[GATEWAY]
    records: list[Any] = []
    ex = Exchange(gw, EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0), EppOptions(),
                  record=records.append)  # fmt: skip
    await ex.handle(_headers())
    reply = await ex.handle(_body(CHAT))
    assert reply.immediate_response.status.code == 429
    await ex.close()
    assert (len(records), refusing.after_calls) == (1, 0)  # its before failed: no after
    assert records[0].outcome.status == 429
    assert not ex.open
