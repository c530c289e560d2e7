"""Pieces of the Anthropic -> OpenAI request translation: blocks, system, tools, tool choice."""

from __future__ import annotations

from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = [
    "blocks_of",
    "convert_anthropic_tool_choice",
    "convert_anthropic_tools",
    "system_text",
    "tool_result_text",
    "user_part",
]


def blocks_of(content: Any, param: str) -> list[dict[str, Any]]:
    """Content blocks of a message (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise InvalidRequest("content must be a string or an array of blocks", param=param)
    return content


def _texts(blocks: list[dict[str, Any]], param: str) -> str:
    out: list[str] = []
    for j, block in enumerate(blocks):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InvalidRequest("only text blocks are allowed here", param=f"{param}[{j}]")
        out.append(block["text"])
    return "\n".join(out) if len(out) > 1 else "".join(out)


def system_text(system: Any) -> str:
    """The top-level ``system`` (a string or text blocks) as one string."""
    if system is None:
        return ""
    return _texts(blocks_of(system, "system"), "system")


def tool_result_text(content: Any, param: str) -> str:
    """The text of a ``tool_result`` (OpenAI tool messages carry text only)."""
    if content is None:
        return ""
    return _texts(blocks_of(content, param), param)


def user_part(block: dict[str, Any], param: str) -> dict[str, Any]:
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


def convert_anthropic_tools(raw: Any) -> list[dict[str, Any]]:
    """OpenAI function tools from Anthropic client tools (server tools are refused)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
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


def convert_anthropic_tool_choice(choice: Any) -> dict[str, Any]:
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
