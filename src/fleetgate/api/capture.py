"""Capture of the response text, for stages that must record it (compliance audit)."""

from __future__ import annotations

from typing import Any

from fleetgate.contract.request import FilterResult
from fleetgate.messages_text import content_text

__all__ = ["ResponseCapture", "response_text"]


def _content(value: Any) -> str:
    return content_text(value, sep="", types=None)  # every part with a text


def response_text(response: dict[str, Any]) -> str:
    """The text of every choice of a non-streaming chat or completion response."""
    parts = []
    for choice in response.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if isinstance(message, dict):
            parts.append(_content(message.get("content")))
        elif isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "\n".join(parts)


class ResponseCapture:
    """A pass-through stream filter that keeps the streamed text (last in the chain)."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._parts)

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict):
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    self._parts.append(_content(delta.get("content")))
                elif isinstance(choice.get("text"), str):
                    self._parts.append(choice["text"])
        return FilterResult([chunk])

    async def finish(self) -> FilterResult:
        return FilterResult([])
