"""Background tasks: the one way every component stops its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

__all__ = [
    "Background",
    "RunsInBackground",
    "cancel_and_wait",
    "cancelling",
    "every",
    "periodic",
    "retry_forever",
]

log = logging.getLogger("fleetgate.tasks")


def cancelling() -> bool:
    """Whether the running task has been asked to stop. A library that turns the cancellation
    into its own error (redis-py can, on a connection it is tearing down) must not make a
    reconnect loop carry on: check this in its ``except Exception``."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None, timeout_s: float = 5.0) -> None:
    """Cancel ``tasks`` (``None`` entries are skipped) and wait until each has finished; one
    that ends with an error or does not stop within ``timeout_s`` is logged, never raised, so a
    shutdown always completes."""
    live = [t for t in tasks if t is not None]
    for task in live:
        task.cancel()
    if not live:
        return
    done, pending = await asyncio.wait(live, timeout=timeout_s)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("task %s ended with %r", task.get_name(), task.exception())
    for task in pending:
        log.error("task %s did not stop within %.0f s", task.get_name(), timeout_s)


async def retry_forever(
    session: Callable[[], Awaitable[None]],
    on_error: Callable[[Exception], None],
    *,
    retry_s: float,
) -> None:
    """Run ``session`` (a connection to a feed) again whenever it fails, after ``retry_s``;
    ``on_error`` sees each failure. Stops on cancellation, also one a library turned into its
    own error (redis-py can, on a connection it is tearing down), which a plain
    ``except Exception`` would otherwise retry for ever."""
    while True:
        try:
            await session()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if cancelling():
                raise asyncio.CancelledError from exc
            on_error(exc)
            await asyncio.sleep(retry_s)


async def every(
    interval_s: Callable[[], float],
    step: Callable[[], Awaitable[object]],
    logger: logging.Logger,
    failed: str,
    *,
    level: int | None = None,
) -> None:
    """Run ``step`` every ``interval_s()`` seconds (read again before each wait) until
    cancelled; a step that raises is logged on ``logger`` as ``failed`` and the loop goes on.
    ``level``: failures are expected (a store or a service that may be away, tried again next
    time): each is logged at that level in one line, ``failed: error``; None: as an error,
    with its traceback."""
    while True:
        await asyncio.sleep(interval_s())
        try:
            await step()
        except Exception as exc:  # a bug in one step must not stop the loop
            if level is None:
                logger.exception(failed)
            else:
                logger.log(level, "%s: %s", failed, exc)


class Background:
    """A component's one background task: ``start`` runs ``run`` once (again only after
    ``aclose``), ``aclose`` stops it with `cancel_and_wait`."""

    def __init__(
        self, run: Callable[[], Coroutine[Any, Any, None]], name: str | None = None
    ) -> None:
        self._run = run
        self._name = name  # the task's name (in `cancel_and_wait`'s logs)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)


class RunsInBackground:
    """A component whose running is its one `Background` task, ``self._task``: ``start``
    starts it, ``aclose`` stops it (a subclass that does more around them overrides them and
    calls these)."""

    _task: Background

    async def start(self) -> None:
        self._task.start()

    async def aclose(self) -> None:
        await self._task.aclose()


def periodic(
    interval_s: Callable[[], float],
    step: Callable[[], Awaitable[object]],
    logger: logging.Logger,
    failed: str,
    *,
    level: int | None = None,
    name: str | None = None,
) -> Background:
    """A component's background task that runs `every` (``step`` each ``interval_s()``
    seconds, a failure logged as ``failed``; ``level`` as there), started and stopped as any
    `Background` (``name``: the task's)."""
    return Background(lambda: every(interval_s, step, logger, failed, level=level), name)
