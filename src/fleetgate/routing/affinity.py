"""Session affinity: a conversation's turns go back to the engine that holds its context.

Keyed by (tenant, alias, conversation id from a request header); bounded LRU with a TTL. The
table remembers how many prompt tokens the last turn had there, so the router can count them as
cached on that engine (the prompt of turn ``n+1`` starts with the prompt and answer of turn
``n``) -- affinity is a term of the cost, not an override, and yields to a loaded engine.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SessionTable", "SessionEntry"]


@dataclass(frozen=True, slots=True)
class SessionEntry:
    engine: str
    prompt_tokens: int
    expires: float


class SessionTable:
    """LRU of conversation -> engine, at most ``size`` entries, each living ``ttl_s``."""

    def __init__(
        self,
        ttl_s: float = 600.0,
        size: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.size = max(1, size)
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str, str], SessionEntry] = OrderedDict()

    def get(self, key: tuple[str, str, str]) -> SessionEntry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires < self._clock():
            del self._entries[key]
            return None
        return entry

    def remember(self, key: tuple[str, str, str], engine: str, prompt_tokens: int) -> None:
        self._entries[key] = SessionEntry(engine, prompt_tokens, self._clock() + self.ttl_s)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
