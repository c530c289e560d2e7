"""The SSE relay's fast path on the wire: a stream that came whole from the upstream leaves in
one write (headers, events, ``[DONE]``, the chunked terminator), the headers never wait for
an event that has not arrived, and events that arrived together count as 0 s gaps."""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from fleetgate.api.state import GATEWAY
from tests.conftest import AUTH, GatewayFactory

# the test loop's socket transport (not in typeshed: private to asyncio)
_SelectorSocketTransport: Any = asyncio.selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
WORDS = ("Hello", " from", " the", " relay", ".")
BODY = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    data = {
        "id": "chatcmpl-relay",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(data) + b"\n\n"


USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
USAGE_ONLY = b"data: " + orjson.dumps({"id": "chatcmpl-relay", "choices": [], "usage": USAGE})
WHOLE = b"".join(
    (
        _event({"role": "assistant", "content": ""}),
        *(_event({"content": w}) for w in WORDS),
        _event({}, "stop"),
        USAGE_ONLY + b"\n\n",
        b"data: [DONE]\n\n",
    )
)


class ScriptedUpstream:
    """An OpenAI-style upstream that sends ``parts`` (bytes, or a float: a pause)."""

    def __init__(self) -> None:
        self.parts: list[bytes | float] = []
        self.url = ""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        parts = self.parts
        if len(parts) == 1 and isinstance(parts[0], bytes):  # the whole stream in one write
            return web.Response(body=parts[0], headers={"Content-Type": "text/event-stream"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in parts:
            if isinstance(part, float):
                await asyncio.sleep(part)
            else:
                await resp.write(part)
        await resp.write_eof()
        return resp


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedUpstream]:
    up = ScriptedUpstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up._chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    up.url = f"http://127.0.0.1:{port}/v1"
    yield up
    await runner.cleanup()


async def _gateway(gateway: GatewayFactory, up: ScriptedUpstream) -> TestClient[Any, Any]:
    dep = {"provider": "openai", "model": "m", "api_base": up.url}
    return await gateway({"models": [{"alias": "tiny", "deployments": [dep]}]})


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, bytes]]]:
    """Every write on a server-side socket, as (local port, bytes) (the test loop's selector
    transports; the gateway's own port tells its writes from the upstream's)."""
    seen: list[tuple[int, bytes]] = []
    write, writelines = _SelectorSocketTransport.write, _SelectorSocketTransport.writelines

    def port(transport: Any) -> int:
        name = transport.get_extra_info("sockname")
        return int(name[1]) if name else 0

    def counted_write(self: Any, data: Any) -> None:
        seen.append((port(self), bytes(data)))
        write(self, data)

    def counted_writelines(self: Any, lines: Any) -> None:
        lines = list(lines)
        seen.append((port(self), b"".join(lines)))
        writelines(self, lines)

    monkeypatch.setattr(_SelectorSocketTransport, "write", counted_write)
    monkeypatch.setattr(_SelectorSocketTransport, "writelines", counted_writelines)
    yield seen


async def test_a_stream_that_came_whole_leaves_the_gateway_in_one_write(
    gateway: GatewayFactory, scripted: ScriptedUpstream, writes: list[tuple[int, bytes]]
) -> None:
    client = await _gateway(gateway, scripted)
    scripted.parts = [WHOLE]
    gw_port = client.server.port
    for want_usage in (False, True):
        body = {**BODY, "stream_options": {"include_usage": True}} if want_usage else BODY
        writes.clear()
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        raw = await resp.read()
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        ours = [data for port, data in writes if port == gw_port]
        assert len(ours) == 1, ours  # headers, every event and the terminator together
        assert ours[0].startswith(b"HTTP/1.1 200") and ours[0].endswith(b"\r\n0\r\n\r\n")
        events = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
        assert events[-1] == b"[DONE]"
        chunks = [orjson.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert text == "".join(WORDS)
        assert [c.get("usage") for c in chunks if not c["choices"]] == (
            [USAGE] if want_usage else []
        )


async def test_the_headers_leave_with_the_first_event_not_after_the_stream(
    gateway: GatewayFactory, scripted: ScriptedUpstream
) -> None:
    client = await _gateway(gateway, scripted)
    scripted.parts = [
        _event({"role": "assistant", "content": ""}),
        1.5,
        *(_event({"content": w}) for w in WORDS),
        b"data: [DONE]\n\n",
    ]
    started = time.monotonic()
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    first = await resp.content.readuntil(b"\n\n")
    assert time.monotonic() - started < 1.2  # the headers and the role chunk, before the pause
    assert b'"role":"assistant"' in first
    rest = await resp.read()
    assert rest.endswith(b"data: [DONE]\n\n")


async def test_the_headers_leave_alone_when_the_first_read_has_nothing_to_relay(
    gateway: GatewayFactory, scripted: ScriptedUpstream
) -> None:
    client = await _gateway(gateway, scripted)
    # a usage-only chunk first (dropped: the client did not ask for usage), then a pause
    scripted.parts = [USAGE_ONLY + b"\n\n", 1.5, _event({"content": "late"}), b"data: [DONE]\n\n"]
    started = time.monotonic()
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.status == 200
    assert time.monotonic() - started < 1.2  # not held until the next event
    raw = await resp.read()
    assert b"late" in raw and b'"usage"' not in raw


async def test_events_that_arrived_together_count_as_zero_gaps(
    gateway: GatewayFactory, scripted: ScriptedUpstream
) -> None:
    client = await _gateway(gateway, scripted)
    scripted.parts = [
        _event({"role": "assistant", "content": ""}) + _event({"content": "a"}),
        0.3,
        _event({"content": "b"}) + _event({"content": "c"}) + _event({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
    [(_, (counts, total, count))] = client.app[GATEWAY].metrics.itl.snapshot()
    # five chunks relayed: four gaps; three of them 0 s (together with the one before), one
    # the pause (observed once, for the first event of the second read)
    assert count == 4
    assert counts[0] == 3
    assert 0.25 <= total < 5.0


async def test_events_read_one_by_one_reach_a_slow_client_whole_and_in_order(
    gateway: GatewayFactory, scripted: ScriptedUpstream
) -> None:
    """Each read after the first is written as a chunk of its own; a client that reads late
    (more than the relay's 64 KiB unsent) gets every byte, in order, in valid chunks."""
    client = await _gateway(gateway, scripted)
    pieces = [f"{i:03d}" + ("x" * (96 * 1024 if i % 7 == 3 else 5)) for i in range(40)]
    scripted.parts = [_event({"role": "assistant", "content": ""})]
    for piece in pieces:
        scripted.parts += [0.005, _event({"content": piece})]
    scripted.parts += [_event({}, "stop"), b"data: [DONE]\n\n"]
    resp = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    assert resp.headers["Transfer-Encoding"] == "chunked"
    await asyncio.sleep(0.5)  # the client falls behind
    raw = await resp.read()
    events = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    text = [orjson.loads(e)["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert text == pieces


async def test_an_http_1_0_client_gets_the_stream_unchunked(
    gateway: GatewayFactory, scripted: ScriptedUpstream
) -> None:
    client = await _gateway(gateway, scripted)
    scripted.parts = [
        _event({"role": "assistant", "content": ""}),
        0.05,
        *(x for w in WORDS for x in (_event({"content": w}), 0.02)),
        b"data: [DONE]\n\n",
    ]
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    payload = orjson.dumps(BODY)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: {AUTH['Authorization']}\r\n".encode()
        + b"Content-Length: %d\r\n\r\n%b" % (len(payload), payload)
    )
    raw = await asyncio.wait_for(reader.read(), 10)  # HTTP/1.0: the body ends with the close
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200")
    assert b"chunked" not in head.lower()
    events = [e.removeprefix(b"data: ") for e in body.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    text = "".join(orjson.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1])
    assert text == "".join(WORDS)
