"""A structured access log written off the hot path, rotated by size and age.

Each request's entry is encoded as its JSON line when it is recorded (a microsecond or two) and
the line goes into a bounded in-memory buffer; a background task writes the buffer every
``flush_interval`` seconds in a worker thread. A full buffer drops the oldest lines and counts
them, it never blocks a request. Encoding at record time keeps the flush's step on the event
loop to one join of bytes: encoding half a second of lines at once took 1-3 ms of the loop's
CPU at ~2,000 requests/s (`bench/overhead/tail.py`), time every request in flight waited, and
the buffer held that many dicts for the collector to walk.

Before each write the worker rotates the file when the write would take it past ``max_bytes``
or its first line is older than ``max_age_s``: ``access.log`` becomes ``access.log.1``, the
older copies move up one (``.1`` → ``.2`` ...) and the one past ``backups`` is deleted. Several
worker processes may share the file: a rotation takes an ``flock`` on ``access.log.lock`` and
happens only if the file is still the one that was found too big or too old, so two processes
never rotate it twice; each write opens the file anew, so every process follows a rotation at
its next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

import orjson

from fleetgate.tasks import cancel_and_wait

__all__ = ["AccessLog"]


class AccessLog:
    def __init__(
        self,
        path: Path | None,
        *,
        max_buffer: int = 100_000,
        flush_interval: float = 0.5,
        max_bytes: int | None = 100 * 1024 * 1024,
        max_age_s: float | None = 86_400.0,
        backups: int = 5,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.backups = backups
        self._buffer: deque[bytes] = deque(maxlen=max_buffer)  # JSON lines, newline included
        self._interval = flush_interval
        self._task: asyncio.Task[None] | None = None
        self._started: tuple[int, float] | None = None  # (inode, time of its first line)
        self.dropped = 0
        self.written = 0
        self.rotations = 0

    def record(self, entry: dict[str, Any]) -> None:
        """Queue ``entry``'s line as it is now (a later change to the dict is not written)."""
        if self.path is None:
            return
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
        try:
            line = orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # a header's bytes that are not UTF-8 (kept as lone surrogates)
            line = orjson.dumps(_valid_text(entry), option=orjson.OPT_APPEND_NEWLINE)
        # copied to its own size: orjson's result keeps the ~4 KB buffer it was written into
        # (a full buffer of 100,000 lines would hold ~400 MB instead of ~25 MB)
        self._buffer.append(memoryview(line).tobytes())

    def _write(self, lines: bytes) -> None:
        assert self.path is not None
        self._rotate_if_due(self.path, len(lines))
        with self.path.open("ab") as fh:
            fh.write(lines)

    def _rotate_if_due(self, path: Path, incoming: int) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        if st.st_size == 0:
            return
        if self._started is None or self._started[0] != st.st_ino:
            self._started = (st.st_ino, _first_time(path) or time.time())
        too_big = self.max_bytes is not None and st.st_size + incoming > self.max_bytes
        too_old = self.max_age_s is not None and time.time() - self._started[1] >= self.max_age_s
        if too_big or too_old:
            self._rotate(path, st.st_ino)

    def _rotate(self, path: Path, inode: int) -> None:
        lock = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino != inode:
                    return  # another process rotated it meanwhile
            except FileNotFoundError:
                return
            if self.backups <= 0:
                path.unlink()
            else:
                for i in range(self.backups - 1, 0, -1):
                    older = path.with_name(f"{path.name}.{i}")
                    if older.exists():
                        older.replace(path.with_name(f"{path.name}.{i + 1}"))
                path.replace(path.with_name(f"{path.name}.1"))
            self.rotations += 1
        finally:
            os.close(lock)  # releases the flock

    async def flush(self) -> None:
        if not self._buffer or self.path is None:
            return
        count = len(self._buffer)
        data = b"".join(self._buffer)
        self._buffer.clear()
        try:
            await asyncio.to_thread(self._write, data)
        except OSError:
            self.dropped += count  # a full disk: the lines are lost, the requests are not
            raise
        self.written += count

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            with contextlib.suppress(OSError):  # counted in `dropped`; retried next time
                await self.flush()

    async def start(self) -> None:
        if self.path is not None and self._task is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        with contextlib.suppress(OSError):
            await self.flush()


def _first_time(path: Path) -> float | None:
    """The ``ts`` of the file's first line (when the file was started), if it has one."""
    try:
        with path.open("rb") as fh:
            entry = orjson.loads(fh.readline(65536))
        ts = entry.get("ts") if isinstance(entry, dict) else None
        return float(ts) if isinstance(ts, int | float) else None
    except (OSError, orjson.JSONDecodeError):
        return None


def _valid_text(value: Any) -> Any:
    """``value`` with every string made valid UTF-8 (a byte that was not: U+FFFD), so that one
    client's bad header bytes cost its log line a replacement character, never its request."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_valid_text(v) for v in value]
    return value
