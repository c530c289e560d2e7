"""OpenAI ``chat.completion`` -> Anthropic message, for the ``/v1/messages`` front door.

Text becomes a ``text`` block, ``reasoning_content`` a ``thinking`` block, tool calls
``tool_use`` blocks (their arguments must be a JSON object); ``finish_reason`` maps to
``stop_reason`` (:data:`STOP_REASONS`), and cached prompt tokens count as cache reads.
"""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.errors import UpstreamBadResponse

__all__ = ["STOP_REASONS", "anthropic_usage", "openai_response_to_anthropic", "stop_reason_of"]

STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""OpenAI ``finish_reason`` -> Anthropic ``stop_reason``."""


def anthropic_usage(usage: Any) -> dict[str, int]:
    """Anthropic ``usage`` from an OpenAI ``usage`` (cached prompt tokens -> cache reads,
    ``cache_creation_input_tokens`` -> cache writes; ``input_tokens`` is the rest)."""
    u = usage if isinstance(usage, dict) else {}
    prompt = int(u.get("prompt_tokens") or 0)
    details = u.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    written = u.get("cache_creation_input_tokens")
    written = written if isinstance(written, int) and not isinstance(written, bool) else 0
    return {
        "input_tokens": max(prompt - cached - written, 0),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
        "output_tokens": int(u.get("completion_tokens") or 0),
    }


def stop_reason_of(finish: Any, matched_stop: Any = None) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)``; vLLM reports the matched stop string as ``stop_reason``."""
    if finish == "stop" and isinstance(matched_stop, str):
        return "stop_sequence", matched_stop
    return STOP_REASONS.get(str(finish), "end_turn"), None


def openai_response_to_anthropic(resp: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """Translate an OpenAI ``chat.completion`` into an Anthropic message object.

    ``model`` overrides the response's model name (e.g. to echo the client's alias).
    Raises :class:`UpstreamBadResponse` if the completion has no choice or a tool call whose
    arguments are not a JSON object (Anthropic's ``input`` must be one).
    """
    choices = resp.get("choices") if isinstance(resp, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamBadResponse("upstream chat completion has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        content.append(_tool_use(call))
    stop_reason, stop_sequence = stop_reason_of(
        choice.get("finish_reason"), choice.get("stop_reason")
    )
    ident = str(resp.get("id", ""))
    return {
        "id": ident if ident.startswith("msg_") else f"msg_{ident}",
        "type": "message",
        "role": "assistant",
        "model": model or str(resp.get("model", "")),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": anthropic_usage(resp.get("usage")),
    }


def _tool_use(call: Any) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        raise UpstreamBadResponse("upstream tool call has no function")
    try:
        parsed = orjson.loads(fn.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise UpstreamBadResponse("upstream tool call arguments are not a JSON object")
    return {
        "type": "tool_use",
        "id": str(call.get("id", "")),
        "name": str(fn.get("name", "")),
        "input": parsed,
    }
