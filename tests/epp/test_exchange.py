"""One ext_proc stream in process: the picker's answers to the messages Envoy sends, on a
gateway built as ``fleetgate epp`` builds it (no Envoy, no engine: nothing is sent)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any, cast

import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from google.protobuf import struct_pb2

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.epp import protocol
from fleetgate.epp.endpoints import endpoint_of
from fleetgate.epp.exchange import EppOptions, Exchange
from fleetgate.epp.picker import EndpointPicker
from fleetgate.epp.server import ExternalProcessor
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


def _observed(msg: Any, request_id: str | None) -> Any:
    """``msg`` as the observing filter sends it: observability mode, the pick's tag."""
    msg.observability_mode = True
    if request_id is not None:
        value = struct_pb2.Struct()
        value.update({"request-id": request_id})
        msg.metadata_context.filter_metadata[protocol.TAG_NAMESPACE].CopyFrom(value)
    return msg


async def test_observed_mode_bills_from_the_observing_stream_and_keeps_the_usage(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    records: list[Any] = []
    handoff: dict[str, Exchange] = {}
    opts = EppOptions(response_body="observed")
    picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0)
    pick = Exchange(gw, picker, opts, record=records.append, handoff=handoff)
    await pick.handle(_headers())
    reply = await pick.handle(_body({**CHAT, "stream": True}))
    headers, body = _sent(reply)
    assert body["stream_options"] == {"include_usage": True}
    rid = reply.dynamic_metadata.fields[protocol.TAG_NAMESPACE].struct_value.fields["request-id"]
    await pick.close()  # Envoy ends the pick's stream before the response: nothing settled
    assert records == [] and list(handoff) == [rid.string_value]
    dep = next(d for d in gw.tables.table.deployments() if endpoint_of(d) == headers[
        protocol.DESTINATION])  # fmt: skip
    assert dep.state.in_flight == 1
    observer = Exchange(gw, picker, opts, record=records.append, handoff=handoff)
    served = headers[protocol.DESTINATION]
    assert await observer.handle(_observed(_response(200, served), rid.string_value)) is None
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n'
    chunk = _observed(_chunk(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', False), None)
    assert await observer.handle(chunk) is None
    assert await observer.handle(_observed(_chunk(usage + b"data: [DONE]\n\n", True), None)) is None
    await observer.close()
    assert len(records) == 1 and records[0].outcome.completion_tokens == 4
    assert (handoff, dep.state.in_flight) == ({}, 0)


async def test_observed_mode_settles_a_pick_no_observer_came_for_as_abandoned(
    gateway: GatewayFactory,
) -> None:
    gw = await _gateway(gateway)
    records: list[Any] = []
    handoff: dict[str, Exchange] = {}
    opts = EppOptions(response_body="observed", observer_wait_s=0.05)
    picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0)
    pick = Exchange(gw, picker, opts, record=records.append, handoff=handoff)
    await pick.handle(_headers())
    await pick.handle(_body({**CHAT, "stream": True}))
    await pick.close()
    assert records == []
    for _ in range(100):  # bounded: the timer fires after 50 ms
        if records:
            break
        await asyncio.sleep(0.02)
    assert len(records) == 1 and records[0].outcome.status == 499
    assert handoff == {}
    assert all(d.state.in_flight == 0 for d in gw.tables.table.deployments())


class _LateRefusal:
    """Leaves a check in flight (as tenancy's overlapped reservation does); ``verdict``
    closes it: None admits, an error refuses."""

    name = "late-refusal"

    def __init__(self, verdict: Exception | None) -> None:
        self.verdict = verdict
        self.held: Callable[[], int] = lambda: 0  # requests held in flight, when it decides
        self.held_at_verdict = -1

    async def before(self, req: Any) -> None:
        gate = req.gate = asyncio.get_running_loop().create_future()

        def decide() -> None:
            self.held_at_verdict = self.held()
            if self.verdict is None:
                gate.set_result(None)
            else:
                gate.set_exception(self.verdict)

        asyncio.get_running_loop().call_later(0.05, decide)

    def after(self, req: Any, outcome: Any) -> None:
        pass


@pytest.mark.parametrize("refused", [False, True])
async def test_a_reservation_in_flight_overlaps_the_pick_and_its_refusal_wins(
    gateway: GatewayFactory, refused: bool
) -> None:
    stage = _LateRefusal(RateLimited("over the limit", retry_after=2) if refused else None)
    client = await gateway(_config(), stages=[stage])
    gw = client.app[GATEWAY]
    stage.held = lambda: sum(d.state.in_flight for d in gw.tables.table.deployments())
    records: list[Any] = []
    ex = Exchange(gw, EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0), EppOptions(),
                  record=records.append)  # fmt: skip
    await ex.handle(_headers())
    reply = await ex.handle(_body(CHAT))
    assert stage.held_at_verdict == 1  # picked (and held) while the check was in flight
    held = stage.held()
    if refused:
        assert reply.immediate_response.status.code == 429
        assert held == 0 and len(records) == 1 and records[0].outcome.status == 429
    else:
        assert reply.request_body.response.header_mutation.set_headers
        assert held == 1
    await ex.close()
    assert stage.held() == 0


class _FailingAdmission:
    """A dispatch hook whose admission fails (a compute budget that refuses): `Choice.hold`
    raises after the pick took its deployment's tpm."""

    def prefer(self, candidates: Any) -> Any:
        return ()

    def extra_body(self, dep: Any) -> None:
        return None

    def admit(self, dep: Any) -> Any:
        raise Overloaded("no compute budget left", code="budget_full", retry_after=1)


class _Hooks:
    name = "failing-admission"

    def __init__(self) -> None:
        self.on = True

    async def before(self, req: Any) -> None:
        if self.on:
            req.dispatch_hooks = (*req.dispatch_hooks, _FailingAdmission())

    def after(self, req: Any, outcome: Any) -> None:
        pass


@pytest.mark.parametrize("failure", ["gate", "hold"])
async def test_a_setup_failure_after_the_pick_settles_its_tpm_hold(
    gateway: GatewayFactory, failure: str
) -> None:
    """The pick holds prompt + max_tokens in the deployment's tpm window; when the request's
    setup fails after it (the overlapped reservation refuses, or the hooks' admission fails
    in `Choice.hold`) the hold is settled to the prompt at once, so the window has room for
    the next request (2 x 1000 would not fit 1500)."""
    stage: Any = _LateRefusal(RateLimited("over", retry_after=2)) if failure == "gate" else _Hooks()
    config = {"models": [{"alias": "chat", "deployments": [
        {"model": "tiny", "api_base": f"http://{A}/v1", "name": "a", "tpm": 1500}]}]}  # fmt: skip
    client = await gateway(config, stages=[stage])
    gw = client.app[GATEWAY]
    big = {**CHAT, "max_tokens": 1000}
    ex = _exchange(gw)
    await ex.handle(_headers())
    reply = await ex.handle(_body(big))
    assert reply.immediate_response.status.code == 429  # a shed is the protocol's 429 too
    await ex.close()
    if failure == "gate":
        stage.verdict = None
    else:
        stage.on = False
    await asyncio.sleep(0.1)  # the settle is sent in the background
    ex = _exchange(gw)
    await ex.handle(_headers())
    headers, _ = _sent(await ex.handle(_body(big)))
    assert headers[protocol.DESTINATION] == A
    await ex.close()


async def _messages(*msgs: Any) -> Any:
    for msg in msgs:
        yield msg


@pytest.mark.parametrize("closed", [False, True])
async def test_the_end_of_a_response_is_settled_after_its_reply_is_sent(
    gateway: GatewayFactory, closed: bool
) -> None:
    """Envoy forwards the response only once it has the reply to its headers (header-only
    mode) or to its last chunk: the settle (stages' ``after``, billing, the pick's counts)
    comes after that reply, not before it. ``closed``: the stream ends right after the reply
    (Envoy done with it): the request is still settled as served, not abandoned."""
    gw = await _gateway(gateway)
    ex = _exchange(gw, response_body="none")
    stream = cast(
        AsyncGenerator[Any, None],
        ExternalProcessor(lambda: ex).Process(
            _messages(_headers(), _body(CHAT), _response(200, A)), None
        ),
    )
    await stream.__anext__()  # the request headers' continue
    await stream.__anext__()  # the pick
    reply = await stream.__anext__()  # the response headers' reply
    assert reply.WhichOneof("response") == "response_headers"
    assert ex._req is not None
    outcome = ex._req.outcome
    assert not ex.done and ex.settle_due  # not settled yet: the reply goes first
    assert outcome.completion_tokens == 0
    if closed:
        await stream.aclose()
    else:
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
    assert ex.done and not ex.open
    assert (outcome.status, outcome.completion_tokens) == (200, 5)  # billed at max_tokens
    assert outcome.tags["epp_billing"][:11] == "header-only"


@pytest.mark.parametrize("observed", [False, True])
async def test_a_streamed_answers_chunks_are_read_at_once_not_through_handle(
    gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch, observed: bool
) -> None:
    """Most of a streamed answer's messages are chunks that do not end it: the stream reads
    them at once (`Exchange.chunk`: the meter, no coroutine per message), with the same
    replies, usage and counts; the last chunk ends the response through `handle` as before."""
    gw = await _gateway(gateway)
    handoff: dict[str, Exchange] = {}
    opts = EppOptions(response_body="observed" if observed else "streamed")
    picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, 0)
    pick = Exchange(gw, picker, opts, handoff=handoff)
    token = b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n'
    response = [_response(200, A), _chunk(token, False), _chunk(token + token, False),
                _chunk(usage, False), _chunk(b"data: [DONE]\n\n", True)]  # fmt: skip
    request = [_headers(), _body({**CHAT, "stream": True})]
    reader = Exchange(gw, picker, opts, handoff=handoff) if observed else pick
    handled: list[str | None] = []
    real = reader.handle

    async def handle(msg: Any, *, settle: bool = True) -> Any:
        handled.append(msg.WhichOneof("request"))
        return await real(msg, settle=settle)

    monkeypatch.setattr(reader, "handle", handle)
    if observed:
        processor = ExternalProcessor(lambda: pick)
        async for _ in processor.Process(_messages(*request), None):
            pass
        rid = next(iter(handoff))
        msgs = [_observed(response[0], rid), *(_observed(m, None) for m in response[1:])]
        replies = [r async for r in ExternalProcessor(lambda: reader).Process(_messages(*msgs),
                                                                              None)]  # fmt: skip
        assert replies == []  # an observing stream is never answered
    else:
        msgs = [*request, *response]
        replies = [r async for r in ExternalProcessor(lambda: pick).Process(_messages(*msgs),
                                                                            None)]  # fmt: skip
        bodies = [r.response_body for r in replies if r.WhichOneof("response") == "response_body"]
        assert [b.HasField("response") for b in bodies] == [False, False, True, False]
        assert bodies[2].response.body_mutation.body == b""  # the injected usage taken out
    assert handled[-2:] == ["response_headers", "response_body"]  # the last chunk only
    assert pick._req is not None
    out = pick._req.outcome
    assert (out.relayed, out.prompt_tokens, out.completion_tokens) == (3, 3, 4)
    assert pick.done and not pick.open
