"""Cheap token estimates for routing, context windows and limits (no tokenizer on the hot path).

The estimate is deliberately a little high so that context-window checks err towards falling
back rather than overflowing: about 4 characters per token for ASCII text, one token per
character for CJK (Chinese, Japanese, Korean: 3 bytes each in UTF-8) and about two characters
per token for other scripts (2 bytes each), plus per-message overhead. It is computed from the
text's UTF-8 length, so ASCII text costs one ``isascii`` check.
"""

from __future__ import annotations

from typing import Any

from fleetgate.messages_text import content_text

__all__ = ["estimate_prompt_tokens", "estimate_text_tokens", "prompt_text", "text_units"]

_PER_MESSAGE = 4
_PER_IMAGE = 765  # OpenAI's high-detail 512px tile count, a conservative default


def text_units(text: str) -> int:
    """Quarter-tokens of ``text``: 1 per ASCII character, 4 per CJK character."""
    n = len(text)
    if text.isascii():
        return n
    extra = len(text.encode("utf-8", "surrogatepass")) - n  # 2 per CJK char, 1 per Cyrillic
    return n + (3 * extra + 1) // 2


def estimate_text_tokens(text: str) -> int:
    """Estimated tokens of plain text (script-aware, see the module docstring)."""
    return (text_units(text) + 3) // 4


def _text_len(content: Any) -> tuple[int, int]:
    """Quarter-token units of text and number of non-text parts in a message's content."""
    if isinstance(content, str):
        return text_units(content), 0
    chars = parts = 0
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    chars += text_units(text)
                else:
                    parts += 1
            elif isinstance(part, str):
                chars += text_units(part)
            elif isinstance(part, int):
                chars += 4  # a token id
    return chars, parts


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """Estimated prompt tokens of a chat, completion or embedding request body."""
    chars = parts = extra = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                c, p = _text_len(message.get("content"))
                chars += c
                parts += p
                extra += _PER_MESSAGE
                calls = message.get("tool_calls")
                if calls:
                    chars += len(str(calls))
        tools = body.get("tools")
        if tools:
            chars += len(str(tools))
    for key in ("prompt", "input"):
        value = body.get(key)
        if value is not None:
            if isinstance(value, list) and value and isinstance(value[0], list):
                extra += sum(len(v) for v in value if isinstance(v, list))
            else:
                c, p = _text_len(value)
                chars += c
    return (chars + 3) // 4 + extra + parts * _PER_IMAGE


def prompt_text(body: dict[str, Any], limit: int = 8192) -> str:
    """The prompt's text (for prefix-aware routing and classifiers), cut at ``limit`` chars."""
    out: list[str] = []
    size = 0
    messages = body.get("messages")
    items: list[Any] = messages if isinstance(messages, list) else [{"content": body.get("prompt")}]
    for message in items:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):  # every part with a text, whatever its type
            content = content_text(content, sep="", types=None)
        if isinstance(content, str):
            out.append(f"{message.get('role', '')}:{content}\n")
            size += len(content)
            if size >= limit:
                break
    return "".join(out)[:limit]
