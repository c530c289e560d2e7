"""A structured access log written off the hot path.

Requests append a small dict to a bounded in-memory buffer; a background task writes the
buffer as JSON lines every ``flush_interval`` seconds in a worker thread. A full buffer drops
the oldest entries and counts them, it never blocks a request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from pathlib import Path
from typing import Any

import orjson

from fleetgate.tasks import cancel_and_wait

__all__ = ["AccessLog"]


class AccessLog:
    def __init__(
        self, path: Path | None, *, max_buffer: int = 100_000, flush_interval: float = 0.5
    ) -> None:
        self.path = path
        self._buffer: deque[dict[str, Any]] = deque(maxlen=max_buffer)
        self._interval = flush_interval
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.written = 0

    def record(self, entry: dict[str, Any]) -> None:
        if self.path is None:
            return
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
        self._buffer.append(entry)

    def _write(self, lines: bytes) -> None:
        assert self.path is not None
        with self.path.open("ab") as fh:
            fh.write(lines)

    async def flush(self) -> None:
        if not self._buffer or self.path is None:
            return
        batch = [self._buffer.popleft() for _ in range(len(self._buffer))]
        data = b"".join(orjson.dumps(e) + b"\n" for e in batch)
        await asyncio.to_thread(self._write, data)
        self.written += len(batch)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except OSError:
                self.dropped += 1

    def start(self) -> None:
        if self.path is not None and self._task is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        with contextlib.suppress(OSError):
            await self.flush()
