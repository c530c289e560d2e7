"""Anthropic Messages response -> OpenAI ``chat.completion``.

- ``text`` blocks are joined into ``message.content`` (``None`` when there are none, as OpenAI
  does for a pure tool call); ``tool_use`` blocks become ``tool_calls`` with JSON-string
  ``arguments``; ``thinking`` blocks become ``message.reasoning_content`` (the field vLLM and
  DeepSeek use). Server-side tool blocks and redacted thinking have no OpenAI form and are left
  out.
- ``stop_reason``: end_turn / stop_sequence / pause_turn -> ``stop``; max_tokens /
  model_context_window_exceeded -> ``length``; tool_use -> ``tool_calls``; refusal ->
  ``content_filter``.
- usage: ``prompt_tokens`` = input + cache read + cache creation tokens (Anthropic counts them
  apart, OpenAI counts all prompt tokens), ``completion_tokens`` = output tokens,
  ``prompt_tokens_details.cached_tokens`` = cache read tokens, and the cache creation tokens
  kept under their Anthropic name ``cache_creation_input_tokens`` (OpenAI has no field for
  them; LiteLLM passes them on the same way) so that spend prices them as cache writes.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

__all__ = [
    "FINISH_REASONS",
    "anthropic_to_openai_response",
    "finish_reason",
    "openai_usage",
    "tool_call",
]

FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic ``stop_reason`` -> OpenAI ``finish_reason``."""


def finish_reason(stop_reason: Any) -> str | None:
    """OpenAI ``finish_reason`` for an Anthropic ``stop_reason`` (unknown ones -> ``stop``)."""
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(str(stop_reason), "stop")


def _int(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def openai_usage(usage: Any) -> dict[str, Any]:
    """OpenAI ``usage`` object from an Anthropic ``usage`` object."""
    u = usage if isinstance(usage, dict) else {}
    cache_read = _int(u, "cache_read_input_tokens")
    prompt = _int(u, "input_tokens") + cache_read + _int(u, "cache_creation_input_tokens")
    completion = _int(u, "output_tokens")
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cache_read},
        "cache_creation_input_tokens": _int(u, "cache_creation_input_tokens"),
    }


def tool_call(block: dict[str, Any], index: int | None = None) -> dict[str, Any]:
    """An OpenAI tool call from an Anthropic ``tool_use`` block."""
    arguments = orjson.dumps(block.get("input") or {}).decode()
    call: dict[str, Any] = {
        "id": str(block.get("id", "")),
        "type": "function",
        "function": {"name": str(block.get("name", "")), "arguments": arguments},
    }
    if index is not None:
        call = {"index": index, **call}
    return call


def anthropic_to_openai_response(
    msg: dict[str, Any], model: str, *, created: int | None = None
) -> dict[str, Any]:
    """Translate an Anthropic message object into an OpenAI ``chat.completion`` object.

    ``model`` is the name the client asked for (the gateway alias), not Anthropic's model id.
    """
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in msg.get("content") or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            thoughts.append(str(block.get("thinking", "")))
        elif kind == "tool_use":
            calls.append(tool_call(block))
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
    }
    if calls:
        message["tool_calls"] = calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return {
        "id": f"chatcmpl-{msg.get('id', '')}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(msg.get("stop_reason")) or "stop",
            }
        ],
        "usage": openai_usage(msg.get("usage")),
    }
