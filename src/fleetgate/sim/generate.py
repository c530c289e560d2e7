"""The ``/v1/chat/completions`` and ``/v1/completions`` handlers, faults included."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from fleetgate.errors import InvalidRequest, UpstreamError
from fleetgate.sim.config import SimConfig
from fleetgate.sim.disagg import transfer_params, transfer_role, with_transfer_params
from fleetgate.sim.encoder import ec_params, remote_params
from fleetgate.sim.faults import FaultPlan, choose_fault
from fleetgate.sim.protocol import ParsedRequest, parse_chat, parse_completion
from fleetgate.sim.responses import DONE, ResponseBuilder, sse, usage_object
from fleetgate.sim.sequence import SeqEvent, Sequence
from fleetgate.sim.state import SIM_STATE, SimState
from fleetgate.sim.timings import record_timing
from fleetgate.sim.tokenizer import Tokenizer

__all__ = [
    "Aborted",
    "abort_connection",
    "before_first_token",
    "chat_completions",
    "completions",
    "guard",
    "read_json",
    "write_frames",
]

Parser = Callable[[Any, SimConfig, Tokenizer, Any], ParsedRequest]
_GARBAGE = b"<html><body>502 Bad Gateway (simulated garbage)</body></html>"


async def read_json(request: web.Request) -> Any:
    """The request body as JSON; 400 ``invalid_request_error`` when it is not JSON."""
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None


class Aborted(Exception):
    """The connection was aborted on purpose (reset / mid-stream fault)."""


def abort_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()
    raise Aborted


async def write_frames(
    request: web.Request, resp: web.StreamResponse, frames: list[bytes], sent: int, cut: int
) -> int:
    """Write ``frames``, ``sent`` frames having gone out before; once ``cut`` frames are out
    (a mid-stream fault; -1: never) the rest is dropped and the connection aborted. Returns
    how many frames are out."""
    if 0 <= cut <= sent + len(frames):
        await resp.write(b"".join(frames[: cut - sent]))
        abort_connection(request)
    await resp.write(b"".join(frames))
    return sent + len(frames)


def _error_response(state: SimState, plan: FaultPlan) -> web.Response:
    headers = {}
    if plan.status in (429, 503):
        headers["Retry-After"] = str(max(1, round(plan.retry_after)))
    kind = "rate_limit_error" if plan.status == 429 else "internal_server_error"
    body = {
        "error": {
            "message": f"simulated error {plan.status}",
            "type": kind,
            "param": None,
            "code": plan.status,
        }
    }
    return web.json_response(body, status=plan.status, headers=headers, dumps=_dumps)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


async def before_first_token(
    request: web.Request, state: SimState, plan: FaultPlan
) -> web.StreamResponse | None:
    """Apply faults that happen before any token; a response ends the request early."""
    kind = plan.kind
    if kind in (None, "midstream"):
        return None
    state.stats.faulted += 1
    state.metrics.faults.labels(state.config.model, kind).inc()
    if kind == "spike":
        await asyncio.sleep(plan.spike_ms / 1000.0)
        return None
    if kind == "error":
        return _error_response(state, plan)
    if kind == "garbage":
        return web.Response(body=_GARBAGE, status=200, content_type="application/json")
    if kind == "hang":
        await state.shutdown.wait()
        return web.Response(status=503)
    abort_connection(request)
    return None  # pragma: no cover - abort_connection raises


def _usage(parsed: ParsedRequest, seqs: list[Sequence]) -> dict[str, Any]:
    cached: dict[int, int] = {}
    for seq in seqs:
        cached.setdefault(id(seq.spec.prompt), max(0, seq.cached_tokens))
    completion = sum(seq.num_generated for seq in seqs)
    return usage_object(parsed.prompt_tokens, completion, sum(cached.values()))


async def _collect(
    parsed: ParsedRequest, seqs: list[Sequence], queue: asyncio.Queue[SeqEvent]
) -> web.Response:
    texts: list[list[str]] = [[] for _ in seqs]
    reasons = [""] * len(seqs)
    remaining = len(seqs)
    while remaining:
        ev = await queue.get()
        texts[ev.index].append(ev.text)
        if ev.finish_reason is not None:
            if ev.finish_reason == "abort":
                raise UpstreamError("the simulated engine could not schedule the request")
            reasons[ev.index] = ev.finish_reason
            remaining -= 1
    body = ResponseBuilder(parsed).body(["".join(t) for t in texts], reasons, _usage(parsed, seqs))
    return web.Response(body=body, content_type="application/json")


async def _stream(
    request: web.Request,
    parsed: ParsedRequest,
    seqs: list[Sequence],
    queue: asyncio.Queue[SeqEvent],
    plan: FaultPlan,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(request)
    builder = ResponseBuilder(parsed)
    limit = plan.after_chunks if plan.kind == "midstream" else -1
    sent = 0
    # Like vLLM, the role chunk goes out with the first token, after prefill.
    opening: list[bytes] | None = builder.opening()
    frames: list[bytes] = []
    remaining = len(seqs)
    while True:
        if frames:
            sent = await write_frames(request, resp, frames, sent, limit)
            frames = []
        if not remaining:
            break
        ev = await queue.get()
        if opening is not None:
            frames.extend(opening)
            opening = None
        while True:
            if ev.finish_reason is not None:
                remaining -= 1
            if ev.finish_reason == "abort":
                frames.append(sse({"error": {"message": "request aborted by the engine"}}))
            else:
                frames.extend(builder.event(ev))
            if queue.empty():
                break
            ev = queue.get_nowait()
    if parsed.include_usage:
        await resp.write(builder.usage_chunk(_usage(parsed, seqs)))
    await resp.write(DONE)
    await resp.write_eof()
    return resp


async def _generate(request: web.Request, parse: Parser) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    state.stats.received += 1
    body = await read_json(request)
    plan = choose_fault(state.faults, request.headers.get("x-sim-fault"), state.rng)
    parsed = parse(body, state.config, state.tokenizer, state.rng)
    if plan.kind == "midstream":
        state.stats.faulted += 1
        state.metrics.faults.labels(state.config.model, "midstream").inc()
        if not parsed.stream:
            abort_connection(request)
    early = await before_first_token(request, state, plan)
    if early is not None:
        return early
    if state.config.ec_role == "ec_producer":
        return await _encode_only(request, state, body, parsed)
    role = transfer_role(body)
    if role != "decode":  # a disaggregated decode gets the images' KV with the prompt's
        await _images(state, body, parsed)
    if role == "decode":  # pull the prompt's KV from the prefill engine, then only decode
        parsed.specs = [dataclasses.replace(s, remote_prefill=True) for s in parsed.specs]
        # Like vLLM's NIXL connector, only the blocks missing from this engine's own prefix
        # cache are pulled (a shared document prefix it already holds is not sent again).
        held = state.engine.cached_prompt_tokens(parsed.specs[0]) if parsed.specs else 0
        pulled = max(0, parsed.prompt_tokens - held)
        state.stats.kv_pulled_tokens += pulled
        await asyncio.sleep(state.config.kv_transfer_ms_per_token * pulled / 1000)
    queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
    engine = state.engine
    at_arrival = (len(engine.running), len(engine.waiting))
    seqs = engine.submit(parsed.specs, queue)
    intended_abort = False
    try:
        if parsed.stream:
            resp = await _stream(request, parsed, seqs, queue, plan)
        else:
            resp = await _collect(parsed, seqs, queue)
            if role == "prefill" and isinstance(resp.body, bytes):
                host, port = _host_port(request)
                params = transfer_params(seqs, state.engine_id, host, port)
                resp.body = with_transfer_params(resp.body, params)
        state.stats.completed += 1
        return resp
    except Aborted:
        intended_abort = True
        raise
    finally:
        aborted = [engine.abort(seq) for seq in seqs]
        if any(aborted) and not intended_abort:
            state.stats.cancelled += 1
            state.metrics.cancelled.labels(state.config.model).inc()
        now = asyncio.get_running_loop().time()
        record_timing(state.timings, request.headers.get("x-request-id"), seqs, at_arrival, now)


def _host_port(request: web.Request) -> tuple[str, int]:
    host, port = request.host.rsplit(":", 1) if ":" in request.host else (request.host, "80")
    return host, int(port)


async def _images(state: SimState, body: Any, parsed: ParsedRequest) -> None:
    """Encoder work of a language-model engine: pull the remotely encoded images (outside the
    step loop, like a KV pull), and charge the rest to the step that admits the request."""
    cfg = state.config
    remote = remote_params(body) if cfg.ec_role == "ec_consumer" else None
    plan = state.encoder.plan(body, cfg.image_tokens, remote)
    if plan.remote_tokens:
        await asyncio.sleep(cfg.ec_transfer_ms_per_token * plan.remote_tokens / 1000)
    if plan.local_tokens and parsed.specs:
        first = dataclasses.replace(parsed.specs[0], encode_tokens=plan.local_tokens)
        parsed.specs = [first, *parsed.specs[1:]]


async def _encode_only(
    request: web.Request, state: SimState, body: Any, parsed: ParsedRequest
) -> web.Response:
    """An encoder instance (``ec_producer``): encode the images one at a time on the one
    encoder, answer one token with ``ec_transfer_params`` naming each image's output."""
    if parsed.stream:
        raise InvalidRequest("an encoder instance answers non-streamed requests", param="stream")
    cfg = state.config
    plan = state.encoder.plan(body, cfg.image_tokens)
    async with state.encoder_busy:
        await asyncio.sleep(cfg.encode_ms_per_image_token * plan.local_tokens / 1000)
    host, port = _host_port(request)
    spec = parsed.specs[0]
    answer = ResponseBuilder(parsed).body(
        [spec.output[0] if spec.output else ""], ["length"],
        usage_object(parsed.prompt_tokens, 1, 0),
    )  # fmt: skip
    out = orjson.loads(answer)
    out["ec_transfer_params"] = ec_params(plan.hashes, cfg.image_tokens, host, port)
    state.stats.completed += 1
    return web.Response(body=orjson.dumps(out), content_type="application/json")


async def guard(run: Awaitable[web.StreamResponse]) -> web.StreamResponse:
    """``run``'s response; a connection aborted on purpose or reset by the client ends it
    with an inert 499."""
    try:
        return await run
    except Aborted:
        # The transport is gone; give aiohttp something inert to (not) send.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        return web.Response(status=499)
    except ConnectionResetError:
        return web.Response(status=499)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``."""
    return await guard(_generate(request, parse_chat))


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``."""
    return await guard(_generate(request, parse_completion))
