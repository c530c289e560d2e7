"""OpenAI wire objects for the simulator's answers: SSE chunks and whole responses."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from fleetgate.sim.protocol import ParsedRequest
from fleetgate.sim.sequence import SeqEvent

__all__ = ["DONE", "ResponseBuilder", "sse", "usage_object"]

DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as JSON."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def usage_object(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """The OpenAI ``usage`` object, with ``prompt_tokens_details.cached_tokens``."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


class ResponseBuilder:
    """Builds the chunks (streaming) or the body (non-streaming) of one request."""

    def __init__(self, parsed: ParsedRequest) -> None:
        self.parsed = parsed
        self.created = int(time.time())
        self.chat = parsed.kind == "chat"
        self.object = "chat.completion.chunk" if self.chat else "text_completion"

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": self.parsed.request_id,
            "object": self.object,
            "created": self.created,
            "model": self.parsed.model,
            "choices": choices,
        }
        if self.parsed.include_usage:
            obj["usage"] = None
        return obj

    def _choice(self, index: int, text: str | None, finish: str | None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}

    def opening(self) -> list[bytes]:
        """The role chunks a chat stream starts with (none for completions)."""
        if not self.chat:
            return []
        return [
            sse(
                self._chunk(
                    [
                        {
                            "index": spec.index,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
            for spec in self.parsed.specs
        ]

    def event(self, ev: SeqEvent) -> list[bytes]:
        """Chunks for one token event: its text, then a finish chunk if it was the last."""
        out: list[bytes] = []
        if ev.text:
            out.append(sse(self._chunk([self._choice(ev.index, ev.text, None)])))
        if ev.finish_reason is not None:
            out.append(sse(self._chunk([self._choice(ev.index, None, ev.finish_reason)])))
        return out

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        """The final ``include_usage`` chunk: no choices, the usage object."""
        obj = self._chunk([])
        obj["usage"] = usage
        return sse(obj)

    def body(self, texts: Sequence[str], reasons: Sequence[str], usage: dict[str, Any]) -> bytes:
        """The whole non-streaming response."""
        choices: list[dict[str, Any]] = []
        for i, (text, reason) in enumerate(zip(texts, reasons, strict=True)):
            if self.chat:
                message = {"role": "assistant", "content": text, "tool_calls": []}
                choices.append(
                    {"index": i, "message": message, "logprobs": None, "finish_reason": reason}
                )
            else:
                choice = {"index": i, "text": text, "logprobs": None, "finish_reason": reason}
                choices.append(choice)
        return orjson.dumps(
            {
                "id": self.parsed.request_id,
                "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created,
                "model": self.parsed.model,
                "choices": choices,
                "usage": usage,
            }
        )
