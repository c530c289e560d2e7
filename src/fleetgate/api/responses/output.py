"""Chat completion -> Responses ``response`` object, for the ``/v1/responses`` bridge.

A chat answer's text becomes one ``message`` output item (``output_text`` content), each tool
call one ``function_call`` item (``call_id`` is the chat tool call's id). ``finish_reason``
decides the status: ``length`` -> ``incomplete`` (``max_output_tokens``), ``content_filter``
(the gateway's output or stream checks, or the upstream) -> ``incomplete``
(``content_filter``), anything else -> ``completed``. Usage is OpenAI's Responses usage:
``input_tokens_details.cached_tokens`` (prompt-cache reads) and ``cache_write_tokens``.

`Turn` gathers the same from a chat stream, chunk by chunk.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from fleetgate.api.responses.request import ResponsesRequest

__all__ = [
    "ResponseMeta",
    "Turn",
    "assistant_messages",
    "new_id",
    "response_object",
    "responses_usage",
    "status_of",
    "turn_from_chat",
]


def new_id(prefix: str) -> str:
    """An id as OpenAI shapes them (``resp_...``, ``msg_...``, ``fc_...``)."""
    return f"{prefix}_{os.urandom(16).hex()}"


@dataclass(slots=True)
class ResponseMeta:
    """What a response object repeats of its request."""

    request: ResponsesRequest
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))


def status_of(finish_reason: str | None) -> tuple[str, str | None]:
    """``(status, incomplete reason)`` for a chat ``finish_reason``."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """Responses ``usage`` from a chat ``usage`` (``None`` when there is none)."""
    if not isinstance(usage, dict):
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    out_details = usage.get("completion_tokens_details")
    out_details = out_details if isinstance(out_details, dict) else {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _int(details.get("cached_tokens")),
            "cache_write_tokens": _int(
                usage.get("cache_creation_input_tokens") or details.get("cache_write_tokens")
            ),
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _int(out_details.get("reasoning_tokens"))},
        "total_tokens": prompt + completion,
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(slots=True)
class _Call:
    id: str
    call_id: str
    name: str
    arguments: str = ""


@dataclass(slots=True)
class Turn:
    """One response's output as the client receives it: text and function calls, in order,
    with their item ids (fixed on first sight, so streamed events and the final object agree).
    """

    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)  # chat tool-call index -> call
    order: list[str] = field(default_factory=list)  # item ids in output order
    finish_reason: str | None = None

    def add_text(self, text: str) -> str:
        """Append text; returns the message item's id."""
        if self.message_id is None:
            self.message_id = new_id("msg")
            self.order.append(self.message_id)
        self.text.append(text)
        return self.message_id

    def add_call(self, index: int, call_id: str, name: str, arguments: str) -> _Call:
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = _Call(new_id("fc"), call_id or new_id("call"), name)
            self.order.append(call.id)
        call.arguments += arguments
        return call

    def feed(self, chunk: dict[str, Any]) -> None:
        """Take a chat stream chunk (choice 0)."""
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.add_text(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self.take_call(_index(call), call)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def take_call(self, index: int, call: dict[str, Any]) -> None:
        raw = call.get("function")
        fn: dict[str, Any] = raw if isinstance(raw, dict) else {}
        arguments = fn.get("arguments")
        name = str(fn.get("name") or "")
        self.add_call(
            index, str(call.get("id") or ""), name, arguments if isinstance(arguments, str) else ""
        )

    def output(self, status: str) -> list[dict[str, Any]]:
        """The output items; the message item's status is ``status``."""
        by_id: dict[str, dict[str, Any]] = {}
        if self.message_id is not None:
            by_id[self.message_id] = message_item(self.message_id, "".join(self.text), status)
        for call in self.calls.values():
            by_id[call.id] = call_item(call, "completed")
        return [by_id[i] for i in self.order]


def _index(call: dict[str, Any]) -> int:
    index = call.get("index", 0)
    return index if isinstance(index, int) else 0


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [text_part(text)],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(call: _Call, status: str) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function_call",
        "status": status,
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
    }


def turn_from_chat(data: dict[str, Any]) -> Turn:
    """The `Turn` of a whole chat completion (choice 0)."""
    turn = Turn()
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    if isinstance(message.get("content"), str) and message["content"]:
        turn.add_text(message["content"])
    for i, call in enumerate(message.get("tool_calls") or ()):
        if isinstance(call, dict):
            turn.take_call(i, call)
    if choice.get("finish_reason"):
        turn.finish_reason = str(choice["finish_reason"])
    return turn


def assistant_messages(turn: Turn) -> list[dict[str, Any]]:
    """The chat message a turn adds to the conversation (none when it said nothing)."""
    if turn.message_id is None and not turn.calls:
        return []
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(turn.text) if turn.message_id is not None else None,
    }
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls.values()
        ]  # fmt: skip
    return [message]


def response_object(
    meta: ResponseMeta,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    incomplete_reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Responses ``response`` object for ``meta``'s request."""
    body = meta.request.body
    text = body.get("text") if isinstance(body.get("text"), dict) else None
    done = status in ("completed", "incomplete", "failed")
    return {
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "completed_at": int(time.time()) if status == "completed" else None,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "instructions": meta.request.instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "model": meta.request.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": meta.request.previous_response_id,
        "store": meta.request.store,
        "temperature": body.get("temperature", 1.0),
        "text": text or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage if done else None,
        "user": body.get("user"),
    }
