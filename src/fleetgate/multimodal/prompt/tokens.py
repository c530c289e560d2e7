"""Token counting for prompt budgeting."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

__all__ = ["ApproxTokenCounter", "TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text and the overhead of one chat message."""

    def count(self, text: str) -> int: ...

    def message_overhead(self) -> int: ...


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return 0x3000 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF


class ApproxTokenCounter:
    """A tokenizer-free estimate: ~4 characters per token, one token per CJK character.

    Close enough for budgeting when the deployment's tokenizer is not at hand; pass a real
    counter (same Protocol) for exact numbers.
    """

    def __init__(self, chars_per_token: float = 4.0, overhead: int = 4) -> None:
        self._cpt = chars_per_token
        self._overhead = overhead

    def count(self, text: str) -> int:
        cjk = sum(1 for ch in text if _is_cjk(ch))
        return cjk + math.ceil((len(text) - cjk) / self._cpt)

    def message_overhead(self) -> int:
        return self._overhead
