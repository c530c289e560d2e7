"""OpenAI ``chat.completion.chunk`` stream -> Anthropic streaming events (``/v1/messages``).

Emits exactly Anthropic's documented sequence: ``message_start``; per content block
``content_block_start``, ``content_block_delta``\\* and ``content_block_stop`` (blocks in order:
``reasoning_content`` -> ``thinking``, ``content`` -> ``text``, each OpenAI tool call ->
``tool_use`` with ``input_json_delta`` fragments); then at :meth:`OpenAIToAnthropicStream.finish`
a ``message_delta`` with ``stop_reason`` and cumulative ``usage`` and ``message_stop``.

Example::

    stream = OpenAIToAnthropicStream("claude-alias")
    for chunk in openai_chunks:
        for event, data in stream.feed(chunk):
            send(encode_sse(event, data))
    for event, data in stream.finish():
        send(encode_sse(event, data))
"""

from __future__ import annotations

from typing import Any

from fleetgate.api.messages.response import anthropic_usage, stop_reason_of

__all__ = ["OpenAIToAnthropicStream"]

Event = tuple[str, dict[str, Any]]


class OpenAIToAnthropicStream:
    """Turns one OpenAI chunk stream into Anthropic ``(event, data)`` pairs."""

    def __init__(self, model: str, *, message_id: str | None = None) -> None:
        self._model = model
        self._id = message_id
        self._started = False
        self._finished = False
        self._open: tuple[str, int] | None = None  # (block kind, block index) of the open block
        self._blocks = 0
        self._tools: dict[int, int] = {}  # OpenAI tool-call index -> Anthropic block index
        self._finish_reason: Any = None
        self._matched_stop: Any = None
        self._usage: dict[str, Any] = {}

    @property
    def usage(self) -> dict[str, int]:
        """Anthropic ``usage`` from the OpenAI usage seen so far."""
        return anthropic_usage(self._usage)

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        """Events for one OpenAI chunk (the parsed JSON of one ``data:`` line)."""
        events = self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                events += self._text_like("thinking", reasoning)
            if isinstance(delta.get("content"), str) and delta["content"]:
                events += self._text_like("text", delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._tool_call(call)
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
                self._matched_stop = choice.get("stop_reason")
        return events

    def finish(self) -> list[Event]:
        """Closing events: ``message_delta`` and ``message_stop`` (once; later calls return [])."""
        if self._finished:
            return []
        events = self._start({})
        events += self._close()
        self._finished = True
        stop_reason, stop_sequence = stop_reason_of(
            self._finish_reason or "stop", self._matched_stop
        )
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        events.append(
            ("message_delta", {"type": "message_delta", "delta": delta, "usage": self.usage})
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def _start(self, chunk: dict[str, Any]) -> list[Event]:
        if self._started:
            return []
        self._started = True
        ident = self._id or str(chunk.get("id") or "")
        message: dict[str, Any] = {
            "id": ident if ident.startswith("msg_") else f"msg_{ident}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self._model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        index = self._open[1]
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _open_block(self, kind: str, block: dict[str, Any]) -> list[Event]:
        events = self._close()
        index = self._blocks
        self._blocks += 1
        self._open = (kind, index)
        start = {"type": "content_block_start", "index": index, "content_block": block}
        events.append(("content_block_start", start))
        return events

    def _delta(self, index: int, delta: dict[str, Any]) -> Event:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": delta},
        )

    def _text_like(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open[0] != kind:
            empty = {"type": "text", "text": ""}
            if kind == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
            events = self._open_block(kind, empty)
        index = self._blocks - 1  # the open block is always the one opened last
        if kind == "thinking":
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "text_delta", "text": text}
        events.append(self._delta(index, delta))
        return events

    def _tool_call(self, call: Any) -> list[Event]:
        if not isinstance(call, dict):
            return []
        position = call.get("index", 0)
        raw_fn = call.get("function")
        fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
        events: list[Event] = []
        if position not in self._tools:
            block = {
                "type": "tool_use",
                "id": str(call.get("id") or ""),
                "name": str(fn.get("name") or ""),
                "input": {},
            }
            events = self._open_block("tool_use", block)
            self._tools[position] = self._blocks - 1
        fragment = fn.get("arguments")
        if isinstance(fragment, str) and fragment:
            delta = {"type": "input_json_delta", "partial_json": fragment}
            events.append(self._delta(self._tools[position], delta))
        return events
