"""Stopping background tasks."""

from __future__ import annotations

import asyncio
import logging

import pytest

from fleetgate.tasks import Background, cancel_and_wait, cancelling, periodic, retry_forever


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


async def test_a_task_that_fails_or_will_not_stop_never_blocks_a_shutdown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released = False

    async def stubborn() -> None:
        while not released:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # what a reconnect loop did when a library swallowed the cancel

    async def failed() -> None:
        raise RuntimeError("boom")

    a, b = asyncio.ensure_future(stubborn()), asyncio.ensure_future(failed())
    await asyncio.sleep(0)
    await cancel_and_wait(a, b, timeout_s=0.2)
    assert "did not stop" in caplog.text and "boom" in caplog.text
    released = True  # still running: a test must not leave it behind
    a.cancel()
    await asyncio.wait([a], timeout=1.0)
    assert a.done()
    b.exception()


async def test_a_loop_sees_a_cancel_a_library_turned_into_its_own_error() -> None:
    seen: list[bool] = []

    async def loop() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                seen.append(cancelling())
                if cancelling():
                    raise
            await asyncio.sleep(0)

    task = asyncio.ensure_future(loop())
    await asyncio.sleep(0)
    assert not cancelling()
    await cancel_and_wait(task, timeout_s=1.0)
    assert task.cancelled() and seen == [True]


async def test_a_feed_is_retried_after_failures_and_stops_when_cancelled() -> None:
    sessions: list[int] = []
    errors: list[str] = []

    async def session() -> None:
        sessions.append(1)
        if len(sessions) < 3:
            raise ConnectionError("feed lost")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ConnectionError("closed while reading") from None  # as redis-py may

    task = asyncio.ensure_future(retry_forever(session, lambda e: errors.append(str(e)), retry_s=0))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(sessions) == 3 and errors == ["feed lost", "feed lost"]
    await cancel_and_wait(task, timeout_s=1.0)
    assert task.cancelled() and len(sessions) == 3


async def test_a_periodic_task_goes_on_after_a_failed_step_and_stops_on_aclose(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps: list[int] = []
    waits: list[int] = []

    def interval() -> float:
        waits.append(1)
        return 0.0

    async def step() -> None:
        steps.append(1)
        if len(steps) == 2:
            raise ValueError("one bad step")

    task = periodic(interval, step, logging.getLogger("test.periodic"), "step failed")
    task.start()
    for _ in range(50):
        await asyncio.sleep(0)
        if len(steps) >= 4:
            break
    await task.aclose()
    done = len(steps)
    assert done >= 4 and len(waits) >= done  # the interval is read before each step
    assert [r.getMessage() for r in caplog.records if r.name == "test.periodic"] == ["step failed"]
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(steps) == done  # stopped


async def test_a_background_task_starts_once_under_its_name_and_again_after_aclose() -> None:
    names: list[str] = []

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        names.append(task.get_name())
        await asyncio.sleep(3600)

    bg = Background(run, name="fg-test-loop")
    bg.start()
    bg.start()  # already running: no second task
    await asyncio.sleep(0)
    assert names == ["fg-test-loop"]
    await bg.aclose()
    bg.start()
    await asyncio.sleep(0)
    assert names == ["fg-test-loop", "fg-test-loop"]
    await bg.aclose()
