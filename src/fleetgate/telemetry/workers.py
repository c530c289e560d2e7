"""Metrics across worker processes: each worker publishes a snapshot file, any worker's
``/metrics`` answers for all of them (a scrape lands on one worker at random)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import orjson

from fleetgate.tasks import Background
from fleetgate.telemetry.registry import Registry

__all__ = ["WorkerMetrics"]


class WorkerMetrics:
    """Writes ``<dir>/worker-<pid>.json`` every ``interval`` s; merges the fresh ones."""

    def __init__(self, registry: Registry, directory: Path, *, interval: float = 1.0) -> None:
        self.registry = registry
        self.directory = directory
        self.interval = interval
        self._path = directory / f"worker-{os.getpid()}.json"
        self._loop = Background(self._run)

    def _write(self, data: bytes) -> None:
        tmp = self._path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(self._path)

    def _read_others(self) -> list[Any]:
        out = []
        stale = time.time() - max(10.0, 5 * self.interval)
        for path in self.directory.glob("worker-*.json"):
            if path == self._path:
                continue
            with contextlib.suppress(OSError, orjson.JSONDecodeError):
                if path.stat().st_mtime < stale:
                    path.unlink(missing_ok=True)  # a worker that is gone
                    continue
                out.append(orjson.loads(path.read_bytes()))
        return out

    async def render(self) -> bytes:
        others = await asyncio.to_thread(self._read_others)
        return self.registry.render_merged(others)

    async def _run(self) -> None:
        while True:
            data = orjson.dumps(self.registry.snapshot())
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._write, data)
            await asyncio.sleep(self.interval)

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._loop.start()

    async def aclose(self) -> None:
        await self._loop.aclose()
        self._path.unlink(missing_ok=True)
