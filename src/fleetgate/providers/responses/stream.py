"""Responses streaming events -> chat ``chat.completion.chunk`` objects.

A native Responses stream is read event by event and turned into the chunks every stage's
stream filters read (the output and stream checks among them); the ``/v1/responses`` route
then writes them to the client as Responses events again (``api/responses/wire``), so what an
output check holds back or cuts never reaches the client, whatever the upstream spoke.

- a role chunk before the first chunk with content (as vLLM's chat stream sends it with the
  first token: the upstream's answer, for TTFT and for retrying, is its first output, not
  ``response.created``, which a hosted API sends before any work);
- ``response.output_text.delta`` and ``response.refusal.delta``: ``content`` deltas;
- ``response.reasoning_text.delta`` / ``response.reasoning_summary_text.delta``:
  ``reasoning_content`` deltas;
- a ``function_call`` item (``response.output_item.added``): a ``tool_calls`` delta with its
  ``index``, ``id`` (the ``call_id``) and name, then one delta per
  ``response.function_call_arguments.delta``; arguments that only arrive whole
  (``...arguments.done`` or ``output_item.done``) are sent then;
- ``response.completed`` / ``response.incomplete``: the finish chunk, then the usage chunk
  (``choices: []``, the usage converted by `response.chat_usage`);
- ``response.failed`` and ``error`` raise the upstream's failure (`response.upstream_failure`).

Other events (``output_item.done`` of a message, ``content_part.*``, ``in_progress``,
annotations) carry nothing the chat form needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetgate.providers.responses.response import (
    chat_usage,
    finish_reason,
    upstream_failure,
)

__all__ = ["ResponsesStreamTranslator"]

Chunk = dict[str, Any]


@dataclass(slots=True)
class _Call:
    index: int
    sent: bool = False  # some of its arguments went out


class ResponsesStreamTranslator:
    """One native Responses stream -> chat chunks; ``finished`` once it ended normally."""

    def __init__(self, model: str, created: int) -> None:
        self.model = model
        self.created = created
        self.id = "chatcmpl-"
        self.finished = False
        self._started = False
        self._calls: dict[str, _Call] = {}  # item id -> call
        self._handlers: dict[str, Callable[[dict[str, Any]], list[Chunk]]] = {
            "response.created": self._created,
            "response.output_text.delta": self._text,
            "response.refusal.delta": self._text,
            "response.reasoning_text.delta": self._reasoning,
            "response.reasoning_summary_text.delta": self._reasoning,
            "response.output_item.added": self._item_added,
            "response.function_call_arguments.delta": self._arguments,
            "response.function_call_arguments.done": self._arguments_done,
            "response.output_item.done": self._item_done,
            "response.completed": self._end,
            "response.incomplete": self._end,
            "response.failed": self._failed,
            "error": self._error,
        }

    def feed(self, event: dict[str, Any]) -> list[Chunk]:
        handler = self._handlers.get(str(event.get("type") or ""))
        chunks = handler(event) if handler is not None else []
        if chunks and not self._started:
            self._started = True
            chunks.insert(0, self._chunk({"role": "assistant", "content": ""}))
        return chunks

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> Chunk:
        return {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }  # fmt: skip

    def _created(self, event: dict[str, Any]) -> list[Chunk]:
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            self.id = response["id"]
        return []

    def _text(self, event: dict[str, Any]) -> list[Chunk]:
        delta = event.get("delta")
        return [self._chunk({"content": delta})] if isinstance(delta, str) and delta else []

    def _reasoning(self, event: dict[str, Any]) -> list[Chunk]:
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        return [self._chunk({"reasoning_content": delta})]

    def _item_added(self, event: dict[str, Any]) -> list[Chunk]:
        item = event.get("item")
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return []
        call = self._calls[str(item.get("id") or "")] = _Call(len(self._calls))
        head = {
            "index": call.index, "id": str(item.get("call_id") or ""), "type": "function",
            "function": {"name": str(item.get("name") or ""), "arguments": ""},
        }  # fmt: skip
        out = [self._chunk({"tool_calls": [head]})]
        return out + self._args(call, item.get("arguments"))

    def _args(self, call: _Call, piece: Any) -> list[Chunk]:
        if not isinstance(piece, str) or not piece:
            return []
        call.sent = True
        part = {"index": call.index, "function": {"arguments": piece}}
        return [self._chunk({"tool_calls": [part]})]

    def _arguments(self, event: dict[str, Any]) -> list[Chunk]:
        call = self._calls.get(str(event.get("item_id") or ""))
        return self._args(call, event.get("delta")) if call is not None else []

    def _arguments_done(self, event: dict[str, Any]) -> list[Chunk]:
        call = self._calls.get(str(event.get("item_id") or ""))
        if call is None or call.sent:
            return []
        return self._args(call, event.get("arguments"))

    def _item_done(self, event: dict[str, Any]) -> list[Chunk]:
        item = event.get("item")
        if not isinstance(item, dict):
            return []
        call = self._calls.get(str(item.get("id") or ""))
        if call is None or call.sent:
            return []
        return self._args(call, item.get("arguments"))

    def _end(self, event: dict[str, Any]) -> list[Chunk]:
        response = event.get("response")
        response = response if isinstance(response, dict) else {}
        self.finished = True
        out = [self._chunk({}, finish_reason(response, bool(self._calls)))]
        usage = chat_usage(response.get("usage"))
        if usage is not None:
            tail = self._chunk({})
            tail["choices"] = []
            tail["usage"] = usage
            out.append(tail)
        return out

    def _failed(self, event: dict[str, Any]) -> list[Chunk]:
        response = event.get("response")
        raise upstream_failure(response.get("error") if isinstance(response, dict) else None)

    def _error(self, event: dict[str, Any]) -> list[Chunk]:
        raise upstream_failure(event)
