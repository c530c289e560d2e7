"""Anthropic Messages request -> OpenAI chat request, for the ``/v1/messages`` front door.

:func:`anthropic_request_to_openai` turns the body an Anthropic SDK client sends into the OpenAI
chat request the gateway serves (``response`` and ``stream`` translate the answer back).
``thinking`` blocks sent by the client are dropped (an OpenAI upstream cannot take them back);
``tool_result`` blocks become ``tool`` messages placed before the user text of the same turn;
``is_error`` on a tool result has no OpenAI field and is dropped.
"""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.errors import InvalidRequest
from fleetgate.http.fields import optional_array
from fleetgate.messages_text import content_text

__all__ = ["anthropic_request_to_openai"]


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
    system = _system_text(body.get("system"))
    if system:
        messages.insert(0, {"role": "system", "content": system})
    out: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    out.update(_stop(body.get("stop_sequences")))
    tools = _convert_tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    out.update(_convert_tool_choice(body.get("tool_choice")))
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        out["user"] = metadata["user_id"]
    out.update(_response_format(body.get("output_config")))
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _stop(stops: Any) -> dict[str, Any]:
    """OpenAI ``stop`` from ``stop_sequences`` (an array of strings)."""
    if not stops:
        return {}
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidRequest("'stop_sequences' must be an array of strings", param="stop_sequences")
    return {"stop": list(stops)}


def _response_format(config: Any) -> dict[str, Any]:
    """OpenAI ``response_format`` from ``output_config.format`` (a JSON schema)."""
    if not config:
        return {}
    if not isinstance(config, dict):
        raise InvalidRequest("'output_config' must be an object", param="output_config")
    fmt = config.get("format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return {}
    schema = {"name": "output", "schema": fmt.get("schema"), "strict": True}
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


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
    for j, block in enumerate(_blocks_of(content, param)):
        where = f"{param}[{j}]"
        if block.get("type") == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise InvalidRequest("'tool_use_id' must be a string", param=f"{where}.tool_use_id")
            text = _tool_result_text(block.get("content"), f"{where}.content")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            parts.append(_user_part(block, where))
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _assistant_message(content: Any, param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks_of(content, param)):
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


def _blocks_of(content: Any, param: str) -> list[dict[str, Any]]:
    """Content blocks of a message (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise InvalidRequest("content must be a string or an array of blocks", param=param)
    return content


def _texts(blocks: list[dict[str, Any]], param: str) -> str:
    def refuse(j: int, _block: Any) -> None:
        raise InvalidRequest("only text blocks are allowed here", param=f"{param}[{j}]")

    return content_text(blocks, on_other=refuse)


def _system_text(system: Any) -> str:
    """The top-level ``system`` (a string or text blocks) as one string."""
    if system is None:
        return ""
    return _texts(_blocks_of(system, "system"), "system")


def _tool_result_text(content: Any, param: str) -> str:
    """The text of a ``tool_result`` (OpenAI tool messages carry text only)."""
    if content is None:
        return ""
    return _texts(_blocks_of(content, param), param)


def _user_part(block: dict[str, Any], param: str) -> dict[str, Any]:
    """An OpenAI content part for an Anthropic user block (text or image)."""
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    source = block.get("source")
    if kind == "image" and isinstance(source, dict):
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
            return {"type": "image_url", "image_url": {"url": url}}
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return {"type": "image_url", "image_url": {"url": source["url"]}}
    if kind == "document" and isinstance(source, dict) and source.get("type") == "base64":
        data = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {"type": "file", "file": {"file_data": data}}
    raise InvalidRequest(f"block type {kind!r} is not supported here", param=f"{param}.type")


def _convert_tools(raw: Any) -> list[dict[str, Any]]:
    """OpenAI function tools from Anthropic client tools (server tools are refused)."""
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(optional_array(raw, "tools")):
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            raise InvalidRequest("only client (custom) tools are supported", param=f"tools[{i}]")
        name = tool.get("name")
        schema = tool.get("input_schema")
        if not isinstance(name, str) or not isinstance(schema, dict):
            raise InvalidRequest("a tool needs 'name' and 'input_schema'", param=f"tools[{i}]")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        tools.append({"type": "function", "function": fn})
    return tools


def _convert_tool_choice(choice: Any) -> dict[str, Any]:
    """OpenAI ``tool_choice`` / ``parallel_tool_calls`` fields from an Anthropic ``tool_choice``."""
    if choice is None:
        return {}
    kind = choice.get("type") if isinstance(choice, dict) else None
    out: dict[str, Any] = {}
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise InvalidRequest("unsupported 'tool_choice'", param="tool_choice")
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    return out
