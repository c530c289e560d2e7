"""OpenAI message content -> Anthropic content blocks (text, images, PDF documents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleetgate.errors import InvalidRequest
from fleetgate.messages_text import content_text

__all__ = ["IMAGE_MEDIA_TYPES", "cache_control", "parse_data_url", "text_of", "user_blocks"]

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

    def refuse(j: int, part: Any) -> None:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allow:
            raise InvalidRequest(
                f"content part type {kind!r} is not allowed here", param=f"{param}[{j}].type"
            )
        raise InvalidRequest(f"'{kind}' must be a string", param=f"{param}[{j}].{kind}")

    # {"type": "text", "text": ...} / {"type": "refusal", "refusal": ...}
    return content_text(content, sep="", types=allow, on_other=refuse)


def cache_control(value: Any, param: str) -> dict[str, Any] | None:
    """A prompt-cache breakpoint as Anthropic takes it (``{"type": "ephemeral"}``, optional
    ``ttl`` ``5m`` or ``1h``), from the same field of an OpenAI request (LiteLLM's convention:
    on a content part, a message, a tool, or the request); ``None`` when absent."""
    if value is None:
        return None
    ttl = value.get("ttl") if isinstance(value, dict) else None
    if not isinstance(value, dict) or value.get("type") != "ephemeral" or ttl not in (
        None, "5m", "1h"
    ):  # fmt: skip
        raise InvalidRequest(
            '\'cache_control\' must be {"type": "ephemeral"} with an optional ttl 5m or 1h',
            param=param,
        )
    return {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}


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
        block: dict[str, Any]
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest("'text' must be a string", param=f"{where}.text")
            if not text:
                continue
            block = {"type": "text", "text": text}
        elif kind == "image_url":
            block = _image_block(part.get("image_url"), f"{where}.image_url")
        elif kind == "file":
            block = _document_block(part.get("file"), f"{where}.file")
        else:
            raise InvalidRequest(
                f"content part type {kind!r} is not supported by Anthropic upstreams",
                param=f"{where}.type",
            )
        marker = cache_control(part.get("cache_control"), f"{where}.cache_control")
        if marker is not None:
            block["cache_control"] = marker
        blocks.append(block)
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
