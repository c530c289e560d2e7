"""Anthropic streaming events -> OpenAI ``chat.completion.chunk`` objects.

Anthropic streams ``message_start``, then per content block ``content_block_start``,
``content_block_delta``\\* and ``content_block_stop``, then ``message_delta`` (stop reason and
cumulative usage) and ``message_stop``; ``ping`` may come at any time and ``error`` may replace
the rest. The translator emits, in order:

1. a role chunk ``{"role": "assistant", "content": ""}`` at ``message_start``;
2. ``content`` deltas for ``text_delta``, ``reasoning_content`` deltas for ``thinking_delta``;
3. for each ``tool_use`` block a ``tool_calls`` delta with ``index``, ``id``, ``type`` and
   ``function.name`` (empty ``arguments``), then one delta per ``input_json_delta`` fragment;
   a tool call that streamed no fragment gets its whole input (``"{}"`` when empty) at
   ``content_block_stop``, so ``arguments`` always parses as JSON;
4. at ``message_stop`` a chunk with an empty delta and ``finish_reason``;
5. if ``include_usage``, a final chunk with ``choices: []`` and ``usage`` (and, as OpenAI does,
   ``"usage": null`` on every earlier chunk).

An ``error`` event raises the matching fleetgate error (``overloaded_error`` -> a retryable
:class:`~fleetgate.errors.UpstreamStatusError` with ``upstream_status=529``).

Example::

    translator = AnthropicStreamTranslator("my-alias", include_usage=True)
    for event, data in parser.feed(raw_bytes):
        for chunk in translator.feed(event, orjson.loads(data)):
            send(chunk)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from fleetgate.providers.anthropic.errors import anthropic_stream_error
from fleetgate.providers.anthropic.response import finish_reason, openai_usage

__all__ = ["AnthropicStreamTranslator"]

Chunk = dict[str, Any]


@dataclass
class _ToolCall:
    index: int
    start_input: Any = field(default_factory=dict)
    streamed: bool = False


def _index(data: dict[str, Any]) -> int:
    value = data.get("index")
    return value if isinstance(value, int) else -1


class AnthropicStreamTranslator:
    """Turns one Anthropic event stream into OpenAI chunk dicts; one instance per response."""

    def __init__(self, model: str, include_usage: bool = False, *, created: int | None = None):
        self._model = model
        self._include_usage = include_usage
        self._created = int(time.time()) if created is None else created
        self._id = "chatcmpl-"
        self._started = False
        self._finished = False
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] = {}
        self._tools: dict[int, _ToolCall] = {}
        self._handlers: dict[str, Callable[[dict[str, Any]], list[Chunk]]] = {
            "message_start": self._message_start,
            "content_block_start": self._block_start,
            "content_block_delta": self._block_delta,
            "content_block_stop": self._block_stop,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
        }

    @property
    def usage(self) -> dict[str, Any] | None:
        """OpenAI ``usage`` so far (final once :attr:`finished`); ``None`` before any event."""
        return openai_usage(self._usage) if self._started else None

    @property
    def finished(self) -> bool:
        """``True`` once ``message_stop`` arrived; a stream that ends earlier was cut off."""
        return self._finished

    @property
    def stop_reason(self) -> str | None:
        """Anthropic's ``stop_reason`` (from ``message_delta``), if it came yet."""
        return self._stop_reason

    def feed(self, event: str, data: dict[str, Any]) -> list[Chunk]:
        """Translate one event (SSE ``event`` name and parsed ``data``) into chunks."""
        kind = event if event and event != "message" else str(data.get("type", ""))
        if kind == "error":
            raise anthropic_stream_error(data)
        handler = self._handlers.get(kind)
        if handler is None:  # ping, and event types added later (Anthropic asks to ignore them)
            return []
        chunks = [] if self._started or kind == "message_start" else self._start({})
        return chunks + handler(data)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> Chunk:
        chunk: Chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            # message_delta usage is cumulative: later values replace earlier ones.
            self._usage.update({k: v for k, v in usage.items() if isinstance(v, int)})

    def _start(self, message: dict[str, Any]) -> list[Chunk]:
        self._started = True
        self._id = f"chatcmpl-{message.get('id', '')}"
        self._merge_usage(message.get("usage"))
        return [self._chunk({"role": "assistant", "content": ""})]

    def _message_start(self, data: dict[str, Any]) -> list[Chunk]:
        message = data.get("message")
        return self._start(message if isinstance(message, dict) else {})

    def _block_start(self, data: dict[str, Any]) -> list[Chunk]:
        block = data.get("content_block")
        if not isinstance(block, dict):
            return []
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": str(block["text"])})]
        if kind == "thinking" and block.get("thinking"):
            return [self._chunk({"reasoning_content": str(block["thinking"])})]
        if kind != "tool_use":
            return []  # server tool blocks have no OpenAI form
        call = _ToolCall(index=len(self._tools), start_input=block.get("input") or {})
        self._tools[_index(data)] = call
        head = {
            "index": call.index,
            "id": str(block.get("id", "")),
            "type": "function",
            "function": {"name": str(block.get("name", "")), "arguments": ""},
        }
        return [self._chunk({"tool_calls": [head]})]

    def _block_delta(self, data: dict[str, Any]) -> list[Chunk]:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            return [self._chunk({"content": str(delta.get("text", ""))})]
        if kind == "thinking_delta":
            return [self._chunk({"reasoning_content": str(delta.get("thinking", ""))})]
        call = self._tools.get(_index(data))
        fragment = delta.get("partial_json")
        if kind != "input_json_delta" or call is None or not fragment:
            return []  # signature_delta, citations_delta, server tool input, empty fragments
        call.streamed = True
        return [self._arguments(call.index, str(fragment))]

    def _arguments(self, index: int, fragment: str) -> Chunk:
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})

    def _block_stop(self, data: dict[str, Any]) -> list[Chunk]:
        call = self._tools.get(_index(data))
        if call is None or call.streamed:
            return []
        call.streamed = True
        return [self._arguments(call.index, orjson.dumps(call.start_input).decode())]

    def _message_delta(self, data: dict[str, Any]) -> list[Chunk]:
        delta = data.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason") is not None:
            self._stop_reason = str(delta["stop_reason"])
        self._merge_usage(data.get("usage"))
        return []

    def _message_stop(self, data: dict[str, Any]) -> list[Chunk]:
        if self._finished:
            return []
        self._finished = True
        chunks = [self._chunk({}, finish_reason(self._stop_reason) or "stop")]
        if self._include_usage:
            chunks.append(
                {
                    "id": self._id,
                    "object": "chat.completion.chunk",
                    "created": self._created,
                    "model": self._model,
                    "choices": [],
                    "usage": openai_usage(self._usage),
                }
            )
        return chunks
