"""A live progress bar on stderr, redrawn at most ten times a second.

Off when stderr is not a terminal or when ``quiet`` is set; the runner calls ``update`` once
per finished request, which costs one comparison when nothing is drawn.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

__all__ = ["NullProgress", "Progress", "ProgressSink", "make_progress"]


class ProgressSink(Protocol):
    """What the runner reports to."""

    def start(self, total: int, label: str) -> None: ...
    def update(self, ok: bool) -> None: ...
    def close(self) -> None: ...


class NullProgress:
    """Reports nothing."""

    def start(self, total: int, label: str) -> None:
        return None

    def update(self, ok: bool) -> None:
        return None

    def close(self) -> None:
        return None


class Progress:
    """``label [#####.....] done/total  rate req/s  failed N  elapsed s``."""

    def __init__(self, stream: TextIO, interval: float = 0.1, width: int = 30) -> None:
        self._stream = stream
        self._interval = interval
        self._width = width
        self._total = 0
        self._label = ""
        self._done = 0
        self._failed = 0
        self._t0 = 0.0
        self._next = 0.0

    def start(self, total: int, label: str) -> None:
        """Begin a new bar of ``total`` requests."""
        self._total, self._label = max(total, 1), label
        self._done = self._failed = 0
        self._t0 = time.perf_counter()
        self._next = 0.0

    def update(self, ok: bool) -> None:
        """Count one finished request; redraw when the interval has passed."""
        self._done += 1
        if not ok:
            self._failed += 1
        now = time.perf_counter()
        if now >= self._next:
            self._next = now + self._interval
            self._draw(now)

    def close(self) -> None:
        """Draw the final state and end the line."""
        self._draw(time.perf_counter())
        self._stream.write("\n")
        self._stream.flush()

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._t0, 1e-9)
        filled = min(self._width, int(self._width * self._done / self._total))
        bar = "#" * filled + "." * (self._width - filled)
        self._stream.write(
            f"\r{self._label} [{bar}] {self._done}/{self._total} "
            f"{self._done / elapsed:8.1f} req/s  failed {self._failed}  {elapsed:6.1f}s"
        )
        self._stream.flush()


def make_progress(quiet: bool, stream: TextIO | None = None) -> ProgressSink:
    """A live bar on ``stream`` (stderr) when it is a terminal and not ``quiet``."""
    out = stream if stream is not None else sys.stderr
    if quiet or not out.isatty():
        return NullProgress()
    return Progress(out)
