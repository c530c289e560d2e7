"""`CachedAnswer`: what a response cache keeps of an answer, and the chat completion it
replays (streamed or not, by the route, like a fresh one)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import orjson

__all__ = ["CachedAnswer"]


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    content: str
    finish_reason: str
    model: str
    prompt_tokens: int
    completion_tokens: int

    def dumps(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def loads(cls, raw: bytes) -> CachedAnswer | None:
        """None when ``raw`` is not an answer this version wrote (a changed format: a miss)."""
        try:
            data = orjson.loads(raw)
            return cls(**data) if isinstance(data, dict) else None
        except (orjson.JSONDecodeError, TypeError):
            return None

    def completion(self, request_id: str) -> dict[str, Any]:
        """The OpenAI chat completion this answer replays as."""
        return {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.content},
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
        }
