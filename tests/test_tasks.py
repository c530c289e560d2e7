"""Stopping background tasks."""

from __future__ import annotations

import asyncio

from fleetgate.tasks import cancel_and_wait


async def test_every_task_is_cancelled_and_awaited() -> None:
    stopped: list[int] = []

    async def forever(i: int) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.append(i)

    tasks = [asyncio.ensure_future(forever(i)) for i in range(3)]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks[0], None, *tasks[1:])
    assert sorted(stopped) == [0, 1, 2] and all(t.done() for t in tasks)
    await cancel_and_wait()  # nothing to do
