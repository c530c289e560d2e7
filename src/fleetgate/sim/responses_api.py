"""The simulator's native ``POST /v1/responses`` (OpenAI's Responses API, as vLLM serves it).

The input (a string or ``message`` / ``function_call`` / ``function_call_output`` items, and
``instructions``) is rendered with the chat template and run on the simulated engine like a
chat request, so prefill, prefix caching (``input_tokens_details.cached_tokens``), scheduling
and metrics behave the same. What it answers:

- a ``function_call`` item when ``tools`` are given and ``tool_choice`` asks for a function
  (``required``: the first tool; ``{"type": "function", "name": ...}``: that one), its
  ``arguments`` a JSON object with each required property (every property when none is
  required) set to the echo text;
- otherwise one ``message`` item: in echo mode the text of the last user message or tool
  output, in random mode seeded words; cut at ``max_output_tokens`` (``status: incomplete``,
  ``reason: max_output_tokens``).

Streamed, it sends the Responses events (``response.created`` ... ``response.completed`` or
``response.incomplete``, each with a ``sequence_number``). It keeps no responses:
``previous_response_id`` is refused (400), as the gateway sends the whole conversation.
The ``midstream`` fault cuts the stream after ``after_chunks`` events; the others apply as on
the chat endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from fleetgate.errors import InvalidRequest, UpstreamError
from fleetgate.sim.faults import choose_fault
from fleetgate.sim.generate import (
    abort_connection,
    before_first_token,
    guard,
    read_json,
    write_frames,
)
from fleetgate.sim.protocol import check_model, specs_for
from fleetgate.sim.sequence import SeqEvent, Sequence
from fleetgate.sim.state import SIM_STATE
from fleetgate.sim.tokenizer import split_pieces

__all__ = ["responses"]


@dataclasses.dataclass(slots=True)
class _Plan:
    """What one request answers: a message, or a call of ``tool`` with ``arguments``."""

    messages: list[dict[str, Any]]
    echo: str
    tool: str | None = None
    arguments: str = ""


def _messages(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Chat messages for the template, and the echo text (the last user or tool text)."""
    out: list[dict[str, Any]] = []
    echo = ""
    if isinstance(body.get("instructions"), str):
        out.append({"role": "system", "content": body["instructions"]})
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise InvalidRequest("'input' must be a string or a non-empty array", param="input")
    for item in items:
        if not isinstance(item, dict):
            raise InvalidRequest("input items must be objects", param="input")
        kind = item.get("type", "message")
        if kind == "function_call":
            text = f"{item.get('name')}({item.get('arguments')})"
            out.append({"role": "assistant", "content": text})
        elif kind == "function_call_output":
            echo = str(item.get("output") or "")
            out.append({"role": "tool", "content": echo})
        elif kind == "message":
            content = _content(item.get("content"))
            out.append({"role": str(item.get("role") or "user"), "content": content})
            if item.get("role") == "user":
                echo = "".join(p["text"] for p in content if p["type"] == "text")
        else:
            raise InvalidRequest(f"input items of type {kind!r} are not supported", param="input")
    return out, echo


def _content(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url")}})
    return parts


def _called_tool(body: Mapping[str, Any]) -> dict[str, Any] | None:
    tools = [t for t in body.get("tools") or () if isinstance(t, dict)]
    choice = body.get("tool_choice")
    if not tools or choice in (None, "auto", "none"):
        return None
    if isinstance(choice, dict):
        named = [t for t in tools if t.get("name") == choice.get("name")]
        if not named:
            raise InvalidRequest("tool_choice names no tool", param="tool_choice")
        return named[0]
    return tools[0]


def _arguments(tool: dict[str, Any], echo: str) -> str:
    raw = tool.get("parameters")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    names = params.get("required") or list((params.get("properties") or {}).keys())
    return orjson.dumps({str(n): echo for n in names}).decode()


def _plan(body: Mapping[str, Any]) -> _Plan:
    if body.get("previous_response_id") is not None:
        raise InvalidRequest(
            "This server keeps no responses: send the whole conversation.",
            param="previous_response_id",
        )
    messages, echo = _messages(body)
    tool = _called_tool(body)
    if tool is None:
        return _Plan(messages, echo)
    return _Plan(messages, echo, str(tool.get("name")), _arguments(tool, echo))


class _Writer:
    """Builds the response object and its events for one request."""

    def __init__(self, body: Mapping[str, Any], model: str, plan: _Plan) -> None:
        self.body = body
        self.model = model
        self.plan = plan
        self.id = f"resp_{uuid.uuid4().hex}"
        self.item_id = f"{'fc' if plan.tool else 'msg'}_{uuid.uuid4().hex}"
        self.call_id = f"call_{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.seq = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def item(self, text: str, status: str) -> dict[str, Any]:
        if self.plan.tool is not None:
            return {"id": self.item_id, "type": "function_call", "status": status,
                    "call_id": self.call_id, "name": self.plan.tool, "arguments": text}  # fmt: skip
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "in_progress" and not text:
            content = []
        return {"id": self.item_id, "type": "message", "role": "assistant", "status": status,
                "content": content}  # fmt: skip

    def response(self, status: str, output: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        body = self.body
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "model": self.model, "output": output, "usage": usage, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
            else None,
            "instructions": body.get("instructions"), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "max_output_tokens": body.get("max_output_tokens"), "store": False,
            "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}}, "truncation": "disabled",
            "metadata": {}, "previous_response_id": None, "background": False,
        }  # fmt: skip

    def opening(self) -> list[bytes]:
        head = self.response("in_progress", [], None)
        out = [self.event("response.created", response=head),
               self.event("response.in_progress", response=head),
               self.event("response.output_item.added", output_index=0,
                          item=self.item("", "in_progress"))]  # fmt: skip
        if self.plan.tool is None:
            part = {"type": "output_text", "text": "", "annotations": []}
            out.append(self.event("response.content_part.added", item_id=self.item_id,
                                  output_index=0, content_index=0, part=part))  # fmt: skip
        return out

    def delta(self, text: str) -> bytes:
        if self.plan.tool is not None:
            return self.event("response.function_call_arguments.delta", item_id=self.item_id,
                              output_index=0, delta=text)  # fmt: skip
        return self.event("response.output_text.delta", item_id=self.item_id, output_index=0,
                          content_index=0, delta=text, logprobs=[])  # fmt: skip

    def closing(self, text: str, status: str, usage: dict[str, Any]) -> list[bytes]:
        item = self.item(text, "completed" if status == "completed" else "incomplete")
        if self.plan.tool is not None:
            out = [self.event("response.function_call_arguments.done", item_id=self.item_id,
                              output_index=0, arguments=text)]  # fmt: skip
        else:
            part = item["content"][0]
            out = [self.event("response.output_text.done", item_id=self.item_id, output_index=0,
                              content_index=0, text=text, logprobs=[]),
                   self.event("response.content_part.done", item_id=self.item_id,
                              output_index=0, content_index=0, part=part)]  # fmt: skip
        out.append(self.event("response.output_item.done", output_index=0, item=item))
        final = self.response(status, [item], usage)
        out.append(self.event(f"response.{status}", response=final))
        return out


def _usage(prompt: int, seq: Sequence) -> dict[str, Any]:
    completion = seq.num_generated
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": max(0, seq.cached_tokens)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


async def responses(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``."""
    return await guard(_respond(request))


async def _respond(request: web.Request) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    state.stats.received += 1
    body = await read_json(request)
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    fault = choose_fault(state.faults, request.headers.get("x-sim-fault"), state.rng)
    model = check_model(body, state.config)
    plan = _plan(body)
    prompt = state.tokenizer.encode_chat(plan.messages)
    limits = {"max_tokens": body.get("max_output_tokens"), "cache_salt": body.get("cache_salt"),
              "priority": body.get("priority")}  # fmt: skip
    spec = specs_for(limits, state.config, state.rng, [(prompt.ids, plan.echo)])[0]
    if plan.tool is not None:  # the call's arguments are what the engine "generates"
        spec = dataclasses.replace(spec, output=split_pieces(plan.arguments), finish_reason="stop")
    if fault.kind == "midstream":
        state.stats.faulted += 1
        state.metrics.faults.labels(state.config.model, "midstream").inc()
        if body.get("stream") is not True:
            abort_connection(request)
    early = await before_first_token(request, state, fault)
    if early is not None:
        return early
    queue: asyncio.Queue[SeqEvent] = asyncio.Queue()
    (seq,) = state.engine.submit([spec], queue)
    writer = _Writer(body, model, plan)
    cut = fault.after_chunks if fault.kind == "midstream" else -1
    try:
        if body.get("stream") is True:
            resp = await _stream(request, writer, queue, len(prompt.ids), seq, cut)
        else:
            text, status = await _collect(queue)
            item = writer.item(text, "completed" if status == "completed" else "incomplete")
            final = writer.response(status, [item], _usage(len(prompt.ids), seq))
            resp = web.Response(body=orjson.dumps(final), content_type="application/json")
        state.stats.completed += 1
        return resp
    finally:
        if state.engine.abort(seq):
            state.stats.cancelled += 1
            state.metrics.cancelled.labels(state.config.model).inc()


async def _collect(queue: asyncio.Queue[SeqEvent]) -> tuple[str, str]:
    """The whole output and the response status."""
    text: list[str] = []
    while True:
        ev = await queue.get()
        text.append(ev.text)
        if ev.finish_reason is not None:
            if ev.finish_reason == "abort":
                raise UpstreamError("the simulated engine could not schedule the request")
            return "".join(text), "incomplete" if ev.finish_reason == "length" else "completed"


async def _stream(
    request: web.Request,
    writer: _Writer,
    queue: asyncio.Queue[SeqEvent],
    prompt: int,
    seq: Sequence,
    cut: int,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    sent = 0
    text: list[str] = []
    frames: list[bytes] = []
    opening: list[bytes] | None = writer.opening()
    while True:
        ev = await queue.get()
        if opening is not None:  # like vLLM: the first events go out after prefill
            frames.extend(opening)
            opening = None
        if ev.finish_reason == "abort":
            frames.append(writer.event("error", code="server_error", param=None,
                                       message="request aborted by the engine"))  # fmt: skip
        elif ev.text:
            text.append(ev.text)
            frames.append(writer.delta(ev.text))
        if ev.finish_reason not in (None, "abort"):
            status = "incomplete" if ev.finish_reason == "length" else "completed"
            frames.extend(writer.closing("".join(text), status, _usage(prompt, seq)))
        sent = await write_frames(request, resp, frames, sent, cut)
        frames = []
        if ev.finish_reason is not None:
            break
    await resp.write_eof()
    return resp
