"""Pieces of the OpenAI -> Anthropic request translation: content parts, tools, tool choice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleetgate.errors import InvalidRequest

__all__ = ["convert_tool_choice", "convert_tools", "parse_data_url", "text_of", "user_blocks"]

IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""Image types Anthropic accepts in a base64 image source."""


def text_of(content: Any, param: str, allow: Sequence[str] = ("text",)) -> str:
    """The text of a string or a list of text parts (``refusal`` parts too when allowed)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest("content must be a string or an array of parts", param=param)
    texts: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allow:
            raise InvalidRequest(
                f"content part type {kind!r} is not allowed here", param=f"{param}[{j}].type"
            )
        value = part.get(kind)  # {"type": "text", "text": ...} / {"type": "refusal", ...}
        if not isinstance(value, str):
            raise InvalidRequest(f"'{kind}' must be a string", param=f"{param}[{j}].{kind}")
        texts.append(value)
    return "".join(texts)


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64_data)`` of a ``data:<type>;base64,<data>`` URL, else ``None``."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[: -len(";base64")].split(";")[0].strip().lower(), data


def user_blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """Anthropic content blocks of an OpenAI user message's content."""
    if content is None or isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest("content must be a string or an array of parts", param=param)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest("'text' must be a string", param=f"{where}.text")
            if text:
                blocks.append({"type": "text", "text": text})
        elif kind == "image_url":
            blocks.append(_image_block(part.get("image_url"), f"{where}.image_url"))
        elif kind == "file":
            blocks.append(_document_block(part.get("file"), f"{where}.file"))
        else:
            raise InvalidRequest(
                f"content part type {kind!r} is not supported by Anthropic upstreams",
                param=f"{where}.type",
            )
    return blocks


def _image_block(value: Any, param: str) -> dict[str, Any]:
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise InvalidRequest("'image_url.url' must be a string", param=f"{param}.url")
    data = parse_data_url(url)
    if data is not None:
        media_type, payload = data
        if media_type not in IMAGE_MEDIA_TYPES:
            raise InvalidRequest(
                f"image type {media_type!r} is not one of {sorted(IMAGE_MEDIA_TYPES)}",
                param=f"{param}.url",
            )
        source = {"type": "base64", "media_type": media_type, "data": payload}
        return {"type": "image", "source": source}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise InvalidRequest("image URL must be https:// or a base64 data: URL", param=f"{param}.url")


def _document_block(value: Any, param: str) -> dict[str, Any]:
    file_data = value.get("file_data") if isinstance(value, dict) else None
    data = parse_data_url(file_data) if isinstance(file_data, str) else None
    if data is None or data[0] != "application/pdf":
        raise InvalidRequest(
            "only PDF files given inline as a base64 data: URL are supported",
            param=f"{param}.file_data",
        )
    source = {"type": "base64", "media_type": "application/pdf", "data": data[1]}
    return {"type": "document", "source": source}


def convert_tools(raw: Any) -> list[dict[str, Any]]:
    """Anthropic ``tools`` from OpenAI function tools."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
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
        tools.append(out)
    return tools


def convert_tool_choice(
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
