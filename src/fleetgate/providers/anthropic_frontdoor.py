"""The reverse direction, for a ``/v1/messages`` front door in front of OpenAI-style upstreams.

:func:`anthropic_request_to_openai` turns an Anthropic Messages request into an OpenAI chat
request, and :func:`openai_response_to_anthropic` turns the chat completion back into an
Anthropic message. ``thinking`` blocks sent by the client are dropped (an OpenAI upstream cannot
take them back); ``tool_result`` blocks become ``tool`` messages placed before the user text of
the same turn; ``is_error`` on a tool result has no OpenAI field and is dropped.
"""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.errors import InvalidRequest, UpstreamBadResponse
from fleetgate.providers.anthropic_frontdoor_parts import (
    blocks_of,
    convert_anthropic_tool_choice,
    convert_anthropic_tools,
    system_text,
    tool_result_text,
    user_part,
)

__all__ = ["STOP_REASONS", "anthropic_request_to_openai", "openai_response_to_anthropic"]

STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""OpenAI ``finish_reason`` -> Anthropic ``stop_reason``."""


def anthropic_request_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    """Translate an Anthropic ``/v1/messages`` body into an OpenAI ``/v1/chat/completions`` body.

    Raises :class:`InvalidRequest` naming the field for shapes that are wrong or untranslatable.
    A streaming request asks for ``stream_options.include_usage`` so the final
    ``message_delta`` can carry real token counts.
    """
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required", param="model")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("'max_tokens' must be a positive integer", param="max_tokens")
    messages = _convert_messages(body.get("messages"))
    system = system_text(body.get("system"))
    if system:
        messages.insert(0, {"role": "system", "content": system})
    out: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    stops = body.get("stop_sequences")
    if stops:
        out["stop"] = list(stops)
    tools = convert_anthropic_tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    out.update(convert_anthropic_tool_choice(body.get("tool_choice")))
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        out["user"] = metadata["user_id"]
    fmt = (body.get("output_config") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {"name": "output", "schema": fmt.get("schema"), "strict": True}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _convert_messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(raw):
        where = f"messages[{i}]"
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "user":
            out.extend(_user_messages(msg.get("content"), f"{where}.content"))
        elif role == "assistant":
            out.append(_assistant_message(msg.get("content"), f"{where}.content"))
        else:
            raise InvalidRequest("role must be 'user' or 'assistant'", param=f"{where}.role")
    return out


def _user_messages(content: Any, param: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks_of(content, param)):
        where = f"{param}[{j}]"
        if block.get("type") == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise InvalidRequest("'tool_use_id' must be a string", param=f"{where}.tool_use_id")
            text = tool_result_text(block.get("content"), f"{where}.content")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            parts.append(user_part(block, where))
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _assistant_message(content: Any, param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks_of(content, param)):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": str(block.get("name", "")), "arguments": arguments}
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": function})
        elif kind not in ("thinking", "redacted_thinking"):
            raise InvalidRequest(
                f"assistant block type {kind!r} is not supported", param=f"{param}[{j}].type"
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def anthropic_usage(usage: Any) -> dict[str, int]:
    """Anthropic ``usage`` from an OpenAI ``usage`` (cached prompt tokens -> cache reads)."""
    u = usage if isinstance(usage, dict) else {}
    prompt = int(u.get("prompt_tokens") or 0)
    details = u.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return {
        "input_tokens": max(prompt - cached, 0),
        "cache_creation_input_tokens": 0,
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
