"""OpenAI chat-completions request -> Anthropic Messages request.

Mapping (OpenAI -> Anthropic):

- ``system`` / ``developer`` messages -> top-level ``system`` (joined with a blank line; a
  system message in the middle of a conversation is hoisted, Anthropic has no other place).
- ``user`` / ``assistant`` turns; consecutive turns of one role are merged, ``tool`` messages
  become ``tool_result`` blocks of a user turn (placed before any text, as Anthropic requires).
- content parts: ``text``; ``image_url`` (``data:`` URL -> base64 source, http(s) -> url
  source); ``file`` with a PDF ``data:`` URL -> ``document``. Other parts are refused.
- assistant ``tool_calls`` -> ``tool_use`` blocks (``arguments`` must be a JSON object).
- ``tools`` -> ``{name, description, input_schema}``; ``tool_choice`` auto/none/required/
  {function} -> auto/none/any/tool; ``parallel_tool_calls: false`` -> ``disable_parallel_tool_use``.
- ``max_completion_tokens`` or ``max_tokens`` (default :data:`DEFAULT_MAX_TOKENS`),
  ``temperature`` (clamped to Anthropic's 0..1), ``top_p``, ``top_k`` (extension),
  ``stop`` -> ``stop_sequences``, ``stream``, ``user`` -> ``metadata.user_id``.
- ``cache_control`` (prompt-cache breakpoints, LiteLLM's convention) on a content part, a
  message (its last block), a tool, or the request (Anthropic's automatic caching) -> the same
  on the Anthropic block, tool or request; a marked system message makes ``system`` a list of
  text blocks.
- ``response_format`` ``json_schema`` -> ``output_config.format`` (structured outputs);
  ``json_object`` has no Anthropic equivalent and is refused.
- Refused with :class:`InvalidRequest`: ``n`` > 1, ``logprobs``, legacy ``functions``, audio.
- Dropped (no equivalent, no visible effect on the answer's shape): ``presence_penalty``,
  ``frequency_penalty``, ``seed``, ``logit_bias``, ``stream_options``, ``store``,
  ``metadata``, ``reasoning_effort``, assistant ``reasoning_content``.
"""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.errors import InvalidRequest
from fleetgate.http.fields import optional_array
from fleetgate.providers.anthropic.content import cache_control, text_of, user_blocks

__all__ = ["DEFAULT_MAX_TOKENS", "openai_chat_to_anthropic"]

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` sent when the client gave none (Anthropic requires one)."""


def openai_chat_to_anthropic(
    body: dict[str, Any], upstream_model: str, *, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> dict[str, Any]:
    """Translate an OpenAI ``/v1/chat/completions`` body into an Anthropic ``/v1/messages`` body.

    Raises :class:`InvalidRequest` (with ``param`` naming the field) for shapes that are wrong
    or that Anthropic cannot serve.

    Example::

        >>> openai_chat_to_anthropic(
        ...     {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "claude-x"
        ... )["messages"]
        [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}]
    """
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    _refuse_unsupported(body)
    system, messages = _convert_messages(body.get("messages"))
    out: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": _max_tokens(body, default_max_tokens),
        "messages": messages,
    }
    if system:
        out["system"] = system
    marker = cache_control(body.get("cache_control"), "cache_control")
    if marker is not None:
        out["cache_control"] = marker
    _copy_sampling(body, out)
    tools = _convert_tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    choice = _convert_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"), tools)
    if choice is not None:
        out["tool_choice"] = choice
    fmt = _response_format(body.get("response_format"))
    if fmt is not None:
        out["output_config"] = {"format": fmt}
    user = body.get("user")
    if user is not None:
        if not isinstance(user, str):
            raise InvalidRequest("'user' must be a string", param="user")
        out["metadata"] = {"user_id": user}
    if body.get("stream"):
        out["stream"] = True
    return out


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise InvalidRequest("Anthropic models return one choice; 'n' must be 1", param="n")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise InvalidRequest("Anthropic models do not return logprobs", param="logprobs")
    if body.get("functions") is not None or body.get("function_call") is not None:
        raise InvalidRequest("use 'tools' instead of the legacy 'functions'", param="functions")
    modalities = body.get("modalities")
    if isinstance(modalities, list) and "audio" in modalities:
        raise InvalidRequest("Anthropic models do not produce audio", param="modalities")


def _max_tokens(body: dict[str, Any], default: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequest(f"'{name}' must be a positive integer", param=name)
        return value
    return default


def _number(body: dict[str, Any], name: str, low: float, high: float | None) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise InvalidRequest(f"'{name}' must be a number >= {low}", param=name)
    if high is not None and value > high:
        raise InvalidRequest(f"'{name}' must be <= {high}", param=name)
    return float(value)


def _copy_sampling(body: dict[str, Any], out: dict[str, Any]) -> None:
    temperature = _number(body, "temperature", 0.0, 2.0)
    if temperature is not None:
        # OpenAI's range is 0..2, Anthropic's 0..1: the top of the range means "most random".
        out["temperature"] = min(temperature, 1.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p is not None:
        out["top_p"] = top_p
    top_k = body.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InvalidRequest("'top_k' must be a positive integer", param="top_k")
        out["top_k"] = top_k
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        if stop:
            out["stop_sequences"] = list(stop)
    elif stop is not None:
        raise InvalidRequest("'stop' must be a string or an array of strings", param="stop")


def _response_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise InvalidRequest(
                "'response_format.json_schema.schema' must be an object",
                param="response_format.json_schema.schema",
            )
        return {"type": "json_schema", "schema": schema}
    if kind == "json_object":
        raise InvalidRequest(
            "Anthropic upstreams have no JSON mode; use response_format type 'json_schema'",
            param="response_format.type",
        )
    raise InvalidRequest("unknown 'response_format.type'", param="response_format.type")


def _convert_messages(raw: Any) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, msg in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise InvalidRequest("each message must be an object", param=where)
        role = msg.get("role")
        if role in ("system", "developer"):
            system.extend(_system_blocks(msg, where))
            continue
        if role == "user":
            blocks = user_blocks(msg.get("content"), f"{where}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(msg, where)
        elif role == "tool":
            role, blocks = "user", [_tool_result(msg, where)]
        else:
            raise InvalidRequest(f"unsupported message role {role!r}", param=f"{where}.role")
        marker = cache_control(msg.get("cache_control"), f"{where}.cache_control")
        if marker is not None and blocks:
            blocks[-1]["cache_control"] = marker
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if any("cache_control" in b for b in system):
        return system, _finish_turns(turns)
    return "\n\n".join(b["text"] for b in system), _finish_turns(turns)


def _system_blocks(msg: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """Text blocks of a system message: one per marked part (a part's or the message's
    ``cache_control`` kept), the unmarked text joined as before."""
    content = msg.get("content")
    marker = cache_control(msg.get("cache_control"), f"{where}.cache_control")
    parts = content if isinstance(content, list) else None
    if parts is None or not any(isinstance(p, dict) and "cache_control" in p for p in parts):
        text = text_of(content, f"{where}.content")
        if not text:
            return []
        block: dict[str, Any] = {"type": "text", "text": text}
        if marker is not None:
            block["cache_control"] = marker
        return [block]
    blocks = []
    for j, part in enumerate(parts):
        text = text_of([part], f"{where}.content[{j}]")
        if text:
            block = {"type": "text", "text": text}
            own = cache_control(part.get("cache_control"), f"{where}.content[{j}].cache_control")
            if own is not None:
                block["cache_control"] = own
            blocks.append(block)
    if marker is not None and blocks:
        blocks[-1]["cache_control"] = marker
    return blocks


def _finish_turns(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if turns and turns[-1]["role"] == "assistant" and not turns[-1]["content"]:
        turns.pop()  # an empty trailing assistant turn carries nothing
    if not turns:
        raise InvalidRequest("'messages' needs at least one user message", param="messages")
    for turn in turns:
        if not turn["content"]:
            raise InvalidRequest(
                f"{turn['role']} message content must not be empty", param="messages"
            )
        if turn["role"] == "user":
            # Anthropic wants tool results first in the turn that answers the tool calls.
            turn["content"].sort(key=lambda block: block.get("type") != "tool_result")
    return turns


def _assistant_blocks(msg: dict[str, Any], where: str) -> list[dict[str, Any]]:
    content = msg.get("content")
    blocks: list[dict[str, Any]] = []
    text = text_of(content, f"{where}.content", allow=("text", "refusal"))
    if text:
        blocks.append({"type": "text", "text": text})
    calls = optional_array(msg.get("tool_calls"), f"{where}.tool_calls")
    for j, call in enumerate(calls):
        blocks.append(_tool_use(call, f"{where}.tool_calls[{j}]"))
    return blocks


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(call.get("id"), str):
        raise InvalidRequest("a tool call needs 'id' and 'function'", param=where)
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("a tool call needs a function name", param=f"{where}.function.name")
    arguments = fn.get("arguments") or "{}"
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidRequest(
            "tool call arguments must be a JSON object", param=f"{where}.function.arguments"
        )
    return {"type": "tool_use", "id": call["id"], "name": name, "input": parsed}


def _tool_result(msg: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = msg.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest("a tool message needs 'tool_call_id'", param=f"{where}.tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    text = text_of(msg.get("content"), f"{where}.content")
    if text:
        block["content"] = text
    return block


def _convert_tools(raw: Any) -> list[dict[str, Any]]:
    """Anthropic ``tools`` from OpenAI function tools."""
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(optional_array(raw, "tools")):
        where = f"tools[{i}]"
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise InvalidRequest("only function tools are supported", param=f"{where}.type")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a function tool needs a name", param=f"{where}.function.name")
        schema = fn.get("parameters")
        if schema is None:
            schema = {"type": "object", "properties": {}}
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            raise InvalidRequest(
                "function parameters must be a JSON schema of type object",
                param=f"{where}.function.parameters",
            )
        out: dict[str, Any] = {"name": name, "input_schema": {"type": "object", **schema}}
        description = fn.get("description")
        if isinstance(description, str) and description:
            out["description"] = description
        if fn.get("strict") is True:
            out["strict"] = True
        marker = cache_control(tool.get("cache_control"), f"{where}.cache_control")
        if marker is not None:
            out["cache_control"] = marker
        tools.append(out)
    return tools


def _convert_tool_choice(
    choice: Any, parallel_tool_calls: Any, tools: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """Anthropic ``tool_choice`` from OpenAI's ``tool_choice`` and ``parallel_tool_calls``."""
    if choice is None:
        result: dict[str, Any] | None = {"type": "auto"} if tools else None
    elif choice == "auto":
        result = {"type": "auto"} if tools else None
    elif choice == "none":
        return {"type": "none"} if tools else None
    elif choice == "required":
        result = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("tool_choice needs a function name", param="tool_choice")
        result = {"type": "tool", "name": name}
    else:
        raise InvalidRequest("unsupported 'tool_choice'", param="tool_choice")
    if result is None:
        return None
    if not tools:
        raise InvalidRequest("'tool_choice' requires 'tools'", param="tool_choice")
    if parallel_tool_calls is False:
        result["disable_parallel_tool_use"] = True
    elif choice is None:
        return None  # Anthropic's default is already auto with parallel calls
    return result
