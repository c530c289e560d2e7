"""Exact prompt token counts for a deployment that names its tokenizer (``tokenizer:``, a
Hugging Face ``tokenizers`` JSON file): its context window is checked with the model's own
count instead of the script-aware estimate (`fleetgate.tokens`).

The file is loaded once, on first use; counting runs on the request path (tokenizers is
native code, about a millisecond for a few thousand tokens), so configure it only where the
estimate is not good enough (small windows, unusual scripts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.errors import ConfigError
from fleetgate.extras import require
from fleetgate.tokens import prompt_text

__all__ = ["PromptCounter"]

_PER_MESSAGE = 4  # chat template tokens around each message, as the estimate counts them


class PromptCounter:
    """Counts a request body's prompt tokens with one tokenizer file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._tokenizer: Any = None

    def _load(self) -> Any:
        if self._tokenizer is None:
            tokenizers = require("tokenizers", extra="ml", purpose="deployments[].tokenizer")
            try:
                self._tokenizer = tokenizers.Tokenizer.from_file(str(Path(self.path)))
            except Exception as exc:  # a missing or malformed file: say which
                raise ConfigError(f"tokenizer {self.path}: {exc}") from exc
        return self._tokenizer

    def count(self, body: dict[str, Any]) -> int:
        text = prompt_text(body, limit=1 << 22)
        messages = body.get("messages")
        overhead = _PER_MESSAGE * len(messages) if isinstance(messages, list) else 0
        encoding = self._load().encode(text, add_special_tokens=False)
        return len(encoding.ids) + overhead
