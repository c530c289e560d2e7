"""An event-loop lag ticker: a task that sleeps ``interval_s`` over and over and records how
late each wake-up came (a handler that blocks the loop makes the wake-up late by as long as it
blocks), by the label of the request in flight.

A stall at the end of a handler is seen only when the ticker next wakes, which may be after
the answer arrived: `LagTicker.flush` waits for that wake-up when it is due (a wake-up not yet
due means the loop ran within ``interval_s`` since the last one, whose lag is counted), so it
is counted for the request that caused it, not for the next one::

    ticker.current = "GET /x"
    await send(...)
    await ticker.flush()
    ticker.current = ""
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

__all__ = ["LagTicker", "ticking"]


@dataclass
class LagTicker:
    interval_s: float = 0.005
    current: str = ""  # what is in flight now (a label of the request)
    worst: dict[str, float] = field(default_factory=dict)  # label -> the largest lag seen, s
    ticks: int = 0
    due: float = 0.0  # the loop time the ticker's sleep ends

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            lag = loop.time() - self.due
            label = self.current
            if lag > self.worst.get(label, 0.0):
                self.worst[label] = lag
            self.ticks += 1

    async def flush(self) -> None:
        """Return once every lag up to now is counted: at once while the ticker's sleep is not
        due yet (the loop cannot have stalled for more than ``interval_s`` since the ticker
        last woke and counted its lag), else once the ticker has woken from it."""
        loop = asyncio.get_running_loop()
        seen = self.ticks
        while self.ticks == seen and loop.time() >= self.due:
            await asyncio.sleep(self.interval_s / 4)

    def over(self, limit_s: float) -> dict[str, float]:
        """The labels whose largest lag passed ``limit_s``."""
        return {k: v for k, v in self.worst.items() if v > limit_s and k}


@contextlib.asynccontextmanager
async def ticking(interval_s: float = 0.005) -> AsyncIterator[LagTicker]:
    ticker = LagTicker(interval_s)
    task = asyncio.create_task(ticker.run())
    try:
        await asyncio.sleep(0)  # running before the first request
        yield ticker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
