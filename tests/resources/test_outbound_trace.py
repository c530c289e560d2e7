"""Side-service calls carry the current W3C trace context (guard model, ASR, TTS, webhooks)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from fleetgate.resources.outbound import JsonService, OutboundHttp

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7


async def test_calls_inside_a_span_carry_its_traceparent() -> None:
    seen: list[str | None] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/check", record)
    async with TestServer(app) as server:
        http = OutboundHttp()
        service = JsonService(str(server.make_url("/v1")), http=http, timeout_s=5)
        await service.post_json("/check", {})  # no span: nothing sent
        context = SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1))
        with trace.use_span(NonRecordingSpan(context)):
            await service.post_json("/check", {})
        await service.post_json("/check", {})  # the span ended: nothing again
        await http.aclose()
    assert seen == [None, f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01", None]
