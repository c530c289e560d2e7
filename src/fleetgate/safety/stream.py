"""Streaming moderation: check generated text every N tokens, release only what passed.

The relay feeds each text delta to :meth:`StreamModerator.push` and sends what the returned
:class:`Release` says, then calls :meth:`StreamModerator.finish` at the end of the upstream
stream::

    mod = policy.stream_moderator(ctx)
    async for delta in upstream_deltas:
        rel = await mod.push(delta)
        if rel.text:
            send(rel.text)
        if rel.stopped:
            cancel_upstream(); send(rel.reply, finish_reason="content_filter"); break
    else:
        rel = await mod.finish()
        ...same handling...

Checks run after ``first_interval_tokens``, then at doubling intervals up to
``interval_tokens``. With ``hold_back`` (default) text waits in a buffer until a check over a
window covering it has passed; a ``margin_chars`` tail stays held after each pass so a phrase
that straddles two checks is never half shown. Without it, text is released at once and a
violation can only stop the rest.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fleetgate.safety.base import Action, PolicyDecision, Verdict
from fleetgate.safety.config import StreamConfig

__all__ = ["Release", "StreamModerator", "estimate_tokens"]

_CHARS_PER_TOKEN = 4
# A wide (CJK and later) character; a run of characters that is no word boundary. Counted and
# measured by regex, not a Python loop: a long delta must not hold the event loop.
_WIDE = re.compile(r"[\u2e80-\U0010ffff]")
_NO_BREAK = re.compile(r"[^\s\u2e80-\U0010ffff]*")


def _count_wide(text: str) -> int:
    return len(_WIDE.findall(text))


def estimate_tokens(text: str) -> int:
    """Cheap token estimate: one per CJK/wide character, one per four other characters."""
    wide = _count_wide(text)
    narrow = len(text) - wide
    return wide + (narrow + _CHARS_PER_TOKEN - 1) // _CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True)
class Release:
    """What may go to the client now; when ``stopped``, end the stream with ``reply``."""

    text: str = ""
    stopped: bool = False
    reply: str = ""
    verdict: Verdict | None = None

    @property
    def finish_reason(self) -> str | None:
        return "content_filter" if self.stopped else None


class StreamModerator:
    """Moderates one streamed reply. Not shared between streams; not thread-safe."""

    def __init__(
        self,
        run: Callable[[str], Awaitable[PolicyDecision]],
        settings: StreamConfig | None = None,
        *,
        canned_reply: str = "",
        on_stop: Callable[[Verdict | None], None] | None = None,
        enabled: bool = True,
    ) -> None:
        s = settings or StreamConfig()
        self._run = run
        self._interval_max = s.interval_tokens
        self._interval = min(s.first_interval_tokens, s.interval_tokens)  # doubles per check
        self._window_chars = s.window_tokens * _CHARS_PER_TOKEN
        self._hold_back = s.hold_back
        self._margin = s.margin_chars
        self._reply = canned_reply
        self._on_stop = on_stop
        self._enabled = enabled
        self._pending = ""  # received, not yet released
        self._context = ""  # tail of released text, seen by the next check
        self._unchecked = ""  # released without hold-back, not yet checked
        self._wide = 0  # since the last check: CJK/wide characters (about a token each)
        self._narrow = 0  # and other characters (about four to a token)
        self._stopped: Release | None = None
        self.checks_run = 0

    @property
    def stopped(self) -> bool:
        return self._stopped is not None

    def _stop(self, decision: PolicyDecision) -> Release:
        self._stopped = Release("", True, self._reply, decision.reason)
        self._pending = ""
        if self._on_stop is not None:
            self._on_stop(decision.reason)
        return self._stopped

    def _remember(self, released: str) -> None:
        self._context = (self._context + released)[-self._window_chars :]

    async def push(self, delta: str) -> Release:
        """Take one delta; return the text now safe to send, or a stop."""
        if self._stopped is not None:
            return self._stopped
        if not self._enabled:
            return Release(delta)
        wide = _count_wide(delta)
        self._wide += wide
        self._narrow += len(delta) - wide
        if not self._hold_back:
            self._unchecked += delta
            if self._due():
                stop = await self._check_released()
                if stop is not None:
                    return stop
            return Release(delta)
        self._pending += delta
        if not self._due():
            return Release()
        return await self._check_pending(final=False)

    def _due(self) -> bool:
        return self._wide + self._narrow // _CHARS_PER_TOKEN >= self._interval

    def _checked(self) -> None:
        self._wide = self._narrow = 0
        self.checks_run += 1
        self._interval = min(self._interval * 2, self._interval_max)

    async def finish(self) -> Release:
        """End of the upstream stream: check and release whatever is still held."""
        if self._stopped is not None:
            return self._stopped
        if not self._enabled:
            return Release()
        if not self._hold_back:
            if self._unchecked:
                stop = await self._check_released()
                if stop is not None:
                    return stop
            return Release()
        if not self._pending:
            return Release()
        return await self._check_pending(final=True)

    async def _check_released(self) -> Release | None:
        window = self._context + self._unchecked
        self._checked()
        decision = await self._run(window)
        self._remember(self._unchecked)
        self._unchecked = ""
        return self._stop(decision) if decision.blocked else None

    async def _check_pending(self, *, final: bool) -> Release:
        pending = self._pending
        self._checked()
        decision = await self._run(self._context + pending)
        if decision.blocked:
            return self._stop(decision)
        if decision.action is Action.MASK:
            masked = await self._run(pending)  # mask the held text itself, then cut it
            if masked.blocked:
                return self._stop(masked)
            pending = masked.text
        cut = len(pending) if final else _safe_cut(pending, len(pending) - self._margin)
        out, self._pending = pending[:cut], pending[cut:]
        self._remember(out)
        return Release(out)


def _safe_cut(text: str, limit: int) -> int:
    """The last word boundary (whitespace, or a CJK character) at or before ``limit``."""
    end = max(min(limit, len(text)), 0)
    word = _NO_BREAK.match(text[end - 1 :: -1]) if end else None  # the word before ``end``
    return end - word.end() if word is not None else 0
