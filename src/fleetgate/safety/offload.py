"""Where the text checks do their CPU work: inline for a short text, a process for a long one.

The word-list, PII and classifier checks run regular expressions over the whole text. Their cost
is linear (``tests/test_regex_linear.py``), but a 1 MiB message still takes about a second of
regex work. Run on the event loop, that second delays every other request of the process
(health checks included); run in a thread, it does too, because ``re`` holds the GIL for the
whole of each pass over the text. A worker process holds no lock the event loop needs.

A short text (under ``min_chars``) is checked inline, then the loop is let go once: a hop to
the process costs more than the check. The process starts on the first long text (spawned,
not forked: the gateway has threads) and serves every check given the same `TextWorker`;
`SafetyRuntime` owns one.

Example::

    worker = TextWorker()
    masked, kinds = await worker.run(PIICheck().mask, text, size=len(text))
    worker.close()
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

__all__ = ["LONG_TEXT", "TextWorker"]

LONG_TEXT = 4_096  # characters: under this a check runs inline (about a millisecond at most)

T = TypeVar("T")


class TextWorker:
    """Runs a check's pure function of a text in a worker process when the text is long.

    ``fn`` and its arguments must pickle (a module-level function; patterns, tuples, dicts).
    """

    def __init__(self, *, min_chars: int = LONG_TEXT, processes: int = 1) -> None:
        self.min_chars = min_chars
        self._processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the text worker is closed")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self._processes, mp_context=multiprocessing.get_context("spawn")
                )
            return self._pool

    async def run(self, fn: Callable[..., T], *args: object, size: int) -> T:
        """``fn(*args)``: inline when ``size`` (the text's length) is under ``min_chars``,
        else in the worker process. A worker that died (killed, out of memory) is replaced on
        the next call; this call raises `BrokenProcessPool` (the policy's ``on_error``)."""
        if size < self.min_chars:
            result = fn(*args)
            # let other tasks in: a stream filter may run many short checks back to back
            await asyncio.sleep(0)
            return result
        pool = self._executor()
        try:
            return await asyncio.wrap_future(pool.submit(fn, *args))
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False)
            raise

    @property
    def started(self) -> bool:
        """Whether the worker process was started (a long text was checked)."""
        return self._pool is not None

    def close(self) -> None:
        """Stop the worker process; calls already running finish in it, queued ones are
        cancelled."""
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
